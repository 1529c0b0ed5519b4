"""The fused code-predictor step computes what the exact cached step computes, within rounding.

The fused step (vLLM's fused CPU norm/RoPE/activation ops and omni-cpu's GEMV or
oneDNN for the linears) rounds differently from the eager modules, so equality
is stated as a tolerance:
- float32: the last position's hidden state within 1e-4 relative (measured ~1e-6;
  a wrong RoPE, norm weight or residual gives errors of order 1);
- bfloat16: within 3 % relative (one bf16 rounding is 0.4 %; a handful of them
  compound over 2 layers; a wrong op is again of order 1);
- codes: greedy and sampled codes of the float32 fused forward equal the exact
  ones (with logits this close an argmax flip needs a near-tie, which random
  weights at this scale do not produce; the test would show it, not hide it).
"""

from __future__ import annotations

import types

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch

from omni_cpu.models import cached_predictor as code_predictor
from omni_cpu.models import fused_predictor, linears
from omni_cpu.models import predictor as dispatcher
from tests.helpers.predictors import GROUPS, VOCAB, inputs, make_predictor
from tests.helpers.tensors import relative

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def hidden_states(
    dtype: torch.dtype, route: str | None, kv_heads: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact, fused) last hidden state after a 2-position start and 3 single positions."""
    predictor = make_predictor(64, kv_heads=kv_heads).to(dtype)
    predictor._setup_compile()
    exact = code_predictor._ExactRunner(predictor.model)
    if route:
        linears.route_linears(predictor, route)
    fused = fused_predictor.FusedRunner(predictor.model)
    generator = torch.Generator().manual_seed(3)
    embeds = torch.randn(2, 5, 64, generator=generator).to(dtype)
    positions = torch.arange(5).unsqueeze(0).expand(2, -1)
    outputs = []
    for runner in (exact, fused):
        cache = code_predictor.FrameCache(predictor.model, 2, GROUPS + 1, dtype)
        out = runner(embeds[:, :2], cache, 0, positions[:, :2])
        for step in range(2, 5):
            out = runner(embeds[:, step : step + 1], cache, step, positions[:, step : step + 1])
        outputs.append(out)
    return outputs[0], outputs[1]


def test_fused_step_matches_the_exact_step_in_float32() -> None:
    exact, fused = hidden_states(torch.float32, route="model")
    assert fused.shape == exact.shape == (2, 64)
    assert relative(fused, exact) < 1e-4


@pytest.mark.parametrize("kv_heads", [1, 4])
def test_fused_step_matches_the_exact_step_for_any_kv_head_count(kv_heads: int) -> None:
    # One KV head makes the key a strided column slice of the qkv output; the fused norm
    # ignores strides, so an uncopied slice normalizes the wrong numbers (off by order 1).
    exact, fused = hidden_states(torch.float32, route="model", kv_heads=kv_heads)
    assert relative(fused, exact) < 1e-4


def test_fused_step_matches_the_exact_step_in_bfloat16() -> None:
    exact, fused = hidden_states(torch.bfloat16, route="model")
    assert relative(fused, exact) < 0.03


def test_fused_step_with_int8_linears_stays_near_the_exact_step() -> None:
    # 8-bit weights and activations, 2 layers: a few percent (per layer ~1-2 %).
    exact, fused = hidden_states(torch.float32, route="int8")
    assert relative(fused, exact) < 0.08


@pytest.mark.parametrize("bsz", [1, 3])
def test_fused_codes_equal_the_exact_codes_in_float32(bsz: int) -> None:
    exact = make_predictor(96).float()
    fused = make_predictor(96).float()
    exact.forward = types.MethodType(code_predictor.cached_forward, exact)  # the exact eager path
    linears.route_linears(fused, "model")
    assert dispatcher.install_forward(fused, "fused") == "fused"
    feed = {k: v.float() for k, v in inputs(bsz, 96).items()}
    noise = torch.rand(bsz, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(7))
    assert torch.equal(
        fused.forward(**feed, sample_uniforms=noise, top_k=8),
        exact.forward(**feed, sample_uniforms=noise, top_k=8),
    )
    assert torch.equal(
        fused.forward(**feed, do_sample=False), exact.forward(**feed, do_sample=False)
    )
