"""The one-call code-predictor step computes what FusedRunner computes, and samples exactly.

The step (kernels/csrc/predictor_step.cpp through omni_cpu.models.predictor_step)
rounds where FusedRunner rounds, but sums a norm in another order and runs the first
call's attention on the decode kernel instead of SDPA, so hidden states are compared
within a tolerance:
- bfloat16, every weight format: within 3 % relative of FusedRunner and of the exact
  eager step (measured 0.2 % bf16, 0.4 % int8, 0.9 % int4 against FusedRunner; a wrong
  norm weight, RoPE or residual gives errors of order 1);
- float32 activations (int8 / int4 weights): within 1e-4 of the exact step (measured
  ~1e-7: both quantize the same activations).
Sampling is not approximated: a frame run in C++ (lm heads, temperature, top-k,
Gumbel-max, embeddings, projection) gives exactly the codes of predict_codes' Python
loop over the same step, with given noise, per-row generators, the global generator
and greedy decoding. And the bits do not depend on the thread count.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch
from vllm_omni.model_executor.models.common import qwen3_code_predictor as upstream
from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
    Qwen3TTSTalkerCodePredictorConfig,
)
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
    Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM as CodePredictor,
)

from omni_cpu import envs
from omni_cpu.kernels import gemv
from omni_cpu.models import cached_predictor, fused_predictor, linears, predictor_step
from omni_cpu.models import predictor as dispatcher
from tests.helpers.predictors import GROUPS, inputs, make_predictor, random_predictor

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_avx512 = pytest.mark.skipif(
    not gemv.cpu_supports(), reason="this CPU lacks avx512_bf16/avx512_vnni"
)
HIDDEN = 128  # int8 / int4 take layers of 128 and more (int8.MIN_QUANTIZED_DIM)
VOCAB = 128  # so the lm heads are packed too, and the whole frame runs in C++
TALKER = 256  # != HIDDEN: each code's embedding goes through the (packed) projection
WEIGHTS = ["model", "int8", "int4"]


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def packed_predictor(
    dtype: torch.dtype, weights: str, talker_hidden: int = TALKER
) -> CodePredictor:
    predictor = make_predictor(talker_hidden, HIDDEN, VOCAB).to(dtype)
    linears.route_linears(predictor, weights)  # before the first forward, as a stage does
    predictor._setup_compile()
    return predictor


class Loop:
    """The step's positions without its frame: predict_codes' own Python sampling loop."""

    def __init__(self, step: predictor_step.StepRunner) -> None:
        self.step = step

    def __call__(self, *args: object) -> torch.Tensor:
        return self.step(*args)


def last_states(
    predictor: CodePredictor, runners: list[object], dtype: torch.dtype
) -> list[torch.Tensor]:
    """Each runner's last hidden state after a 2-position start and 3 single positions."""
    generator = torch.Generator().manual_seed(3)
    embeds = torch.randn(2, 5, HIDDEN, generator=generator).to(dtype)
    positions = torch.arange(5).unsqueeze(0).expand(2, -1)
    outputs = []
    for runner in runners:
        cache = cached_predictor.FrameCache(predictor.model, 2, GROUPS + 1, dtype)
        out = runner(embeds[:, :2], cache, 0, positions[:, :2])
        for step in range(2, 5):
            out = runner(embeds[:, step : step + 1], cache, step, positions[:, step : step + 1])
        outputs.append(out)
    return outputs


def feed(bsz: int, dtype: torch.dtype, talker_hidden: int = TALKER) -> dict[str, torch.Tensor]:
    return {
        k: v.to(dtype) if v.is_floating_point() else v
        for k, v in inputs(bsz, talker_hidden).items()
    }


@pytest.fixture(params=["avx512", "avx2"])
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which GEMV module packs the linears and runs the step (OMNI_CPU_GEMV=avx2 forces its
    AVX2 build, which any AVX2 CPU runs)."""
    if request.param == "avx2":
        if not gemv.avx2_cpu_supports():
            pytest.skip("this CPU lacks AVX2")
        monkeypatch.setenv(envs.GEMV.name, "avx2")
    elif not gemv.cpu_supports():
        pytest.skip("this CPU lacks avx512_bf16/avx512_vnni")
    return request.param


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("weights", WEIGHTS)
def test_step_matches_the_fused_step_in_bfloat16(isa: str, weights: str) -> None:
    predictor = packed_predictor(torch.bfloat16, weights)
    step = predictor_step.StepRunner.build(predictor)
    assert step is not None
    exact = cached_predictor._ExactRunner(predictor.model)
    fused = fused_predictor.FusedRunner(predictor.model)
    want_exact, want_fused, got = last_states(predictor, [exact, fused, step], torch.bfloat16)
    assert got.shape == (2, HIDDEN)
    assert relative(got, want_fused) < 0.03
    assert relative(got, want_exact) < 0.03


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_step_matches_the_exact_step_in_float32(isa: str, weights: str) -> None:
    predictor = packed_predictor(torch.float32, weights)
    step = predictor_step.StepRunner.build(predictor)
    assert step is not None
    exact = cached_predictor._ExactRunner(predictor.model)
    want, got = last_states(predictor, [exact, step], torch.float32)
    assert relative(got, want) < 1e-4


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("bsz", [1, 3])
def test_frame_codes_equal_the_python_loop_codes(isa: str, weights: str, bsz: int) -> None:
    predictor = packed_predictor(torch.bfloat16, weights)
    step = predictor_step.StepRunner.build(predictor)
    assert step is not None and step.frames
    given = feed(bsz, torch.bfloat16)

    def codes(runner: object, **kwargs: object) -> torch.Tensor:
        with torch.inference_mode():
            return cached_predictor.predict_codes(predictor, runner, **given, **kwargs)

    def both(**kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        return codes(step, **kwargs), codes(Loop(step), **kwargs)

    noise = torch.rand(bsz, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(7))
    frame, python = both(sample_uniforms=noise, top_k=8)
    assert frame.shape == (bsz, GROUPS)
    assert torch.equal(frame, python)
    assert torch.equal(*both(do_sample=False))
    assert torch.equal(*both(top_k=0, temperature=0.7, sample_uniforms=noise))
    # Drawn inside: per-row generators, then the global one, seeded alike for both.
    rows = [[torch.Generator().manual_seed(row) for row in range(bsz)] for _ in range(2)]
    assert torch.equal(codes(step, generators=rows[0]), codes(Loop(step), generators=rows[1]))
    torch.manual_seed(11)
    frame = codes(step, top_k=8)
    torch.manual_seed(11)
    assert torch.equal(frame, codes(Loop(step), top_k=8))


@needs_avx512
def test_frame_codes_equal_the_exact_codes_in_float32() -> None:
    # int8 weights, float32 activations: both paths quantize the same activations, so
    # with logits this close only a near-tie could flip a code (none at this scale).
    exact = packed_predictor(torch.float32, "int8")
    stepped = packed_predictor(torch.float32, "int8")
    exact.forward = types.MethodType(cached_predictor.cached_forward, exact)  # the exact eager path
    assert dispatcher.install_forward(stepped, "fused") == "step"
    given = feed(3, torch.float32)
    noise = torch.rand(3, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(7))
    assert torch.equal(
        stepped.forward(**given, sample_uniforms=noise, top_k=8),
        exact.forward(**given, sample_uniforms=noise, top_k=8),
    )
    greedy = {**given, "do_sample": False}
    assert torch.equal(stepped.forward(**greedy), exact.forward(**greedy))


@pytest.mark.parametrize("weights", WEIGHTS)
def test_one_and_two_threads_give_the_same_bits(isa: str, weights: str) -> None:
    predictor = packed_predictor(torch.bfloat16, weights)
    step = predictor_step.StepRunner.build(predictor)
    assert step is not None
    given = feed(4, torch.bfloat16)
    noise = torch.rand(4, GROUPS - 1, VOCAB, generator=torch.Generator().manual_seed(7))
    results = []
    for count in (1, 2):
        with threads(count), torch.inference_mode():
            codes = cached_predictor.predict_codes(
                predictor, step, **given, sample_uniforms=noise, top_k=8
            )
            (state,) = last_states(predictor, [step], torch.bfloat16)
        results.append((codes, state))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


def real_shapes_predictor() -> CodePredictor:
    """The 0.6B code predictor's shapes (hidden 1024, 16 x 128 heads over 8 KV heads,
    intermediate 3072, vocabulary 2048), one layer, random bf16 weights."""
    config = Qwen3TTSTalkerCodePredictorConfig(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=1,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=2048,
        num_code_groups=GROUPS,
    )
    return random_predictor(config, talker_hidden=1024, std=0.05).to(torch.bfloat16).eval()


def test_the_real_shapes_run_like_fused_and_sample_like_the_loop(isa: str) -> None:
    predictor = real_shapes_predictor()
    linears.route_linears(predictor, "model")
    predictor._setup_compile()
    step = predictor_step.StepRunner.build(predictor)
    assert step is not None and step.frames
    fused = fused_predictor.FusedRunner(predictor.model)
    given = feed(2, torch.bfloat16, talker_hidden=1024)
    noise = torch.rand(2, GROUPS - 1, 2048, generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        frame = cached_predictor.predict_codes(
            predictor, step, **given, sample_uniforms=noise, top_k=50
        )
        python = cached_predictor.predict_codes(
            predictor, Loop(step), **given, sample_uniforms=noise, top_k=50
        )
    assert torch.equal(frame, python)
    embeds = torch.randn(2, 3, 1024, generator=torch.Generator().manual_seed(3))
    embeds = embeds.to(torch.bfloat16)
    states = []
    for runner in (step, fused):
        cache = cached_predictor.FrameCache(predictor.model, 2, GROUPS + 1, torch.bfloat16)
        positions = torch.arange(3).unsqueeze(0).expand(2, -1)
        runner(embeds[:, :2], cache, 0, positions[:, :2])
        states.append(runner(embeds[:, 2:], cache, 2, positions[:, 2:]))
    assert relative(states[0], states[1]) < 0.03


@needs_avx512
def test_the_dispatcher_takes_the_step_only_where_the_gemv_took_the_linears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert dispatcher.install_forward(packed_predictor(torch.bfloat16, "int4"), "fused") == "step"
    # float32 weights go to oneDNN, not the GEMV: FusedRunner, unchanged.
    assert dispatcher.install_forward(packed_predictor(torch.float32, "model"), "fused") == "fused"
    monkeypatch.setenv(envs.GEMV.name, "off")
    assert dispatcher.install_forward(packed_predictor(torch.bfloat16, "int8"), "fused") == "fused"


def test_the_avx2_build_runs_the_step_on_its_own_packed_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not gemv.avx2_cpu_supports():
        pytest.skip("this CPU lacks AVX2")
    monkeypatch.setenv(envs.GEMV.name, "avx2")
    predictor = packed_predictor(torch.bfloat16, "int8")
    assert linears.summary(predictor)["gemv-avx2-w8a8"] > 0
    assert dispatcher.install_forward(predictor, "fused") == "step"


def test_noise_is_drawn_between_the_bounds_vllm_omni_draws_between() -> None:
    assert predictor_step.UNIFORM_EPS == upstream._UNIFORM_EPS


def test_the_modules_format_codes_are_the_python_tables() -> None:
    # predictor_step.cpp's Format enum is stated by the module; this side writes its codes.
    module = gemv.kernel() or gemv.avx2_kernel()
    if module is None:
        pytest.skip("no GEMV module runs on this CPU")
    assert module.predictor_step_formats == predictor_step.FORMAT_CODES
    assert predictor_step.matches(module)


def test_a_module_whose_codes_differ_is_not_used() -> None:
    drifted = types.SimpleNamespace(predictor_step_formats={"bf16": 0, "w8a8": 2, "w4a8": 1})
    assert not predictor_step.matches(drifted)
    assert not predictor_step.matches(types.SimpleNamespace())  # a module from before the check
