"""The KV-cached code predictor gives what vLLM-Omni's re-prefill forward gives.

Both forwards run on the same module and the same sampling noise in float64,
where rounding cannot flip a sampled code, so the codes must be identical.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch

from omni_cpu.models import cached_predictor as cached
from omni_cpu.models import predictor as dispatcher
from tests.helpers.predictors import GROUPS, VOCAB, inputs, make_predictor

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.mark.parametrize("talker_hidden", [64, 96], ids=["same-width", "projected"])
@pytest.mark.parametrize("bsz", [1, 3])
def test_sampled_codes_equal_the_reprefill_forward(bsz: int, talker_hidden: int) -> None:
    predictor = make_predictor(talker_hidden)
    noise = torch.rand(bsz, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(7))
    stock = predictor.forward(**inputs(bsz, talker_hidden), sample_uniforms=noise, top_k=8)
    mine = cached.cached_forward(
        predictor, **inputs(bsz, talker_hidden), sample_uniforms=noise, top_k=8
    )
    assert mine.shape == (bsz, GROUPS)
    assert torch.equal(mine, stock)


def test_greedy_codes_equal_the_reprefill_forward() -> None:
    predictor = make_predictor(64)
    stock = predictor.forward(**inputs(2, 64), do_sample=False)
    assert torch.equal(cached.cached_forward(predictor, **inputs(2, 64), do_sample=False), stock)


def test_codes_depend_on_the_earlier_positions() -> None:
    # Guards against a cache that ignores what earlier calls wrote: a different
    # layer-0 embedding (position 1) must change the later codes under greedy decoding.
    predictor = make_predictor(64)
    first = inputs(1, 64)
    second = dict(first, layer0_embed=-first["layer0_embed"])
    a = cached.cached_forward(predictor, **first, do_sample=False)
    b = cached.cached_forward(predictor, **second, do_sample=False)
    assert not torch.equal(a[:, 1:], b[:, 1:])


def test_a_top_p_that_leaves_one_code_gives_the_greedy_codes() -> None:
    # vLLM-Omni 0.30.0's loop raises on top_p < 1; a request's own top_p must sample instead
    # (qwen-tts's code predictor takes one). A nucleus of one code is the argmax, whatever
    # the noise, and the same noise without it samples other codes.
    predictor = make_predictor(64)
    noise = torch.rand(2, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(3))
    greedy = cached.cached_forward(predictor, **inputs(2, 64), do_sample=False)
    nucleus = cached.cached_forward(
        predictor, **inputs(2, 64), sample_uniforms=noise, top_k=0, top_p=1e-6
    )
    free = cached.cached_forward(predictor, **inputs(2, 64), sample_uniforms=noise, top_k=0)
    assert torch.equal(nucleus, greedy)
    assert not torch.equal(free, greedy)


def test_a_top_k_past_the_vocabulary_is_no_limit() -> None:
    # vLLM's talker takes such a top_k as none; vLLM-Omni's loop would raise on it.
    predictor = make_predictor(64)
    noise = torch.rand(1, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(5))
    past = cached.cached_forward(predictor, **inputs(1, 64), sample_uniforms=noise, top_k=VOCAB + 5)
    none = cached.cached_forward(predictor, **inputs(1, 64), sample_uniforms=noise, top_k=0)
    assert torch.equal(past, none)


def test_installs_on_the_tts_predictor_and_not_where_buffers_are_returned() -> None:
    predictor = make_predictor(64)  # float64: no fused kernel, so the eager cached forward
    assert dispatcher.install_forward(predictor, "fused") == "cached"
    assert predictor.forward.__func__ is cached.cached_forward
    omni_style = make_predictor(64)
    omni_style._wrapper_config.return_proj_buf = True
    assert dispatcher.install_forward(omni_style, "fused") is None
    assert dispatcher.install_forward(make_predictor(64), "stock") is None


def test_fused_falls_back_to_cached_where_its_kernels_do_not_run() -> None:
    # float64 has no vLLM CPU kernel: the exact cached forward takes over.
    assert dispatcher.install_forward(make_predictor(64), "fused") == "cached"
