"""The streaming code2wav decode gives the whole-utterance decode, each frame decoded once.

All on the tiny checkpoint's real codec (16 codebooks, 1920 samples per frame,
a 72-frame sliding window; 2 transformer layers instead of 8), in float32.

Tolerance, float32: 1e-5 absolute on audio in [-1, 1]. The streamed decode runs
the same operations on the same weights; only the lengths the GEMMs and
convolutions see differ (a 25-frame chunk against the whole utterance), which
changes how sums are blocked and so their rounding, by a few float32 ulps
(1.2e-7 relative) per operation. Through the decoder's ~40 layers that stays
near 1e-6 (measured 2.0e-6 here with the one-pass SnakeBeta's own sine,
3.3e-6 on the 0.6B codec before it). A state carried
wrongly (a lost convolution tail, a key at the wrong position) shows up at the
first chunk boundary as errors of the signal's own size (~0.2), five orders
above the bound. The stock async-chunk path, for comparison, is 2.3e-4 off.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch
from safetensors import safe_open
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav import Qwen3TTSCode2Wav

from omni_cpu.models import code2wav as stream

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

SAMPLES_PER_FRAME = 1920
TOLERANCE = 1e-5
QUANTIZERS = 16


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_cpu.checkpoint.writer import make_checkpoint

    return Path(make_checkpoint("tiny", tmp_path_factory.mktemp("tiny") / "ckpt", seed=0))


def load_code2wav(checkpoint: Path) -> Qwen3TTSCode2Wav:
    """vLLM-Omni's code2wav model in async-chunk mode, with the checkpoint's decoder weights."""
    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(model=str(checkpoint), async_chunk=True)
    )
    model = Qwen3TTSCode2Wav(vllm_config=config)
    weights = {}
    with safe_open(str(checkpoint / "speech_tokenizer" / "model.safetensors"), "pt") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open has no iterator
            if key.startswith("decoder."):
                weights[key.removeprefix("decoder.")] = handle.get_tensor(key)
    model.decoder.load_state_dict(weights)
    model.decoder.eval().precompute_snake_caches()
    return model


@pytest.fixture(scope="module")
def model(checkpoint: Path) -> Qwen3TTSCode2Wav:
    model = load_code2wav(checkpoint)
    assert stream.install_streaming_decode(model)
    return model


def random_codes(frames: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (QUANTIZERS, frames), generator=generator)


def whole_decode(model: Qwen3TTSCode2Wav, codes: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.decoder(codes.unsqueeze(0)).reshape(-1)


def send_chunk(
    model: Qwen3TTSCode2Wav, request_id: str, codes: torch.Tensor, finished: bool, **meta: Any
) -> torch.Tensor:
    """One async-chunk step as vLLM-Omni's connector delivers it: new frames only."""
    info = {
        "codes": {"audio": codes.reshape(-1)},
        "meta": {"request_id": request_id, "finished": torch.tensor(finished), **meta},
    }
    out = model.forward(
        input_ids=torch.zeros(codes.numel(), dtype=torch.long),
        runtime_additional_information=[info],
        request_ids=[request_id],
    )
    return out.multimodal_outputs["model_outputs"][0]


def stream_chunks(model: Qwen3TTSCode2Wav, request_id: str, codes: torch.Tensor, sizes: list[int]):
    start, pieces = 0, []
    for index, size in enumerate(sizes):
        finished = index == len(sizes) - 1
        pieces.append(send_chunk(model, request_id, codes[:, start : start + size], finished))
        start += size
    return pieces


# 1 frame first (time to first audio), then 25-frame chunks past the 72-frame
# sliding window, then a ragged last chunk of 13.
CHUNKS = [1, 25, 25, 25, 25, 25, 25, 13]


def test_streamed_audio_equals_the_whole_decode(model: Qwen3TTSCode2Wav) -> None:
    codes = random_codes(sum(CHUNKS))
    pieces = stream_chunks(model, "whole", codes, CHUNKS)
    assert [piece.numel() for piece in pieces] == [n * SAMPLES_PER_FRAME for n in CHUNKS]
    whole = whole_decode(model, codes)
    difference = (torch.cat(pieces) - whole).abs().max().item()
    assert difference <= TOLERANCE
    assert whole.std().item() > 0.05  # not silence: the comparison means something


def test_voice_clone_prefix_is_decoded_as_past_and_cut(model: Qwen3TTSCode2Wav) -> None:
    reference, codes = random_codes(30, seed=1), random_codes(40, seed=2)
    first = torch.cat((reference, codes[:, :1]), dim=1)
    meta = {"ref_context_size": 30, "ref_context_request_id": "clone", "ref_context_included": True}
    pieces = [send_chunk(model, "clone", first, False, **meta)]
    pieces.append(send_chunk(model, "clone", codes[:, 1:26], False))
    pieces.append(send_chunk(model, "clone", codes[:, 26:], True))
    whole = whole_decode(model, torch.cat((reference, codes), dim=1))
    audio = torch.cat(pieces)
    assert audio.numel() == 40 * SAMPLES_PER_FRAME
    assert (audio - whole[30 * SAMPLES_PER_FRAME :]).abs().max().item() <= TOLERANCE


def test_interleaved_requests_keep_their_own_state(model: Qwen3TTSCode2Wav) -> None:
    a, b = random_codes(51, seed=3), random_codes(51, seed=4)
    pieces: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    start = 0
    for size in (1, 25, 25):
        for name, codes in (("a", a), ("b", b)):
            piece = send_chunk(model, name, codes[:, start : start + size], start + size == 51)
            pieces[name].append(piece)
        start += size
    for name, codes in (("a", a), ("b", b)):
        difference = (torch.cat(pieces[name]) - whole_decode(model, codes)).abs().max().item()
        assert difference <= TOLERANCE


def test_requests_batched_in_one_step_each_get_their_own_frames(model: Qwen3TTSCode2Wav) -> None:
    # One forward with two requests of different lengths, as the scheduler batches
    # them: the model zero-pads the shorter one, which must not reach its audio.
    a, b = random_codes(26, seed=5), random_codes(30, seed=6)
    pieces: dict[str, list[torch.Tensor]] = {"x": [], "y": []}
    for (start_a, end_a), (start_b, end_b) in (((0, 1), (0, 1)), ((1, 26), (1, 30))):
        chunks = {"x": a[:, start_a:end_a], "y": b[:, start_b:end_b]}
        finished = start_a == 1
        infos = [
            {
                "codes": {"audio": chunk.reshape(-1)},
                "meta": {"request_id": name, "finished": torch.tensor(finished)},
            }
            for name, chunk in chunks.items()
        ]
        out = model.forward(
            input_ids=torch.zeros(sum(c.numel() for c in chunks.values()), dtype=torch.long),
            runtime_additional_information=infos,
            request_ids=list(chunks),
            seq_token_counts=[c.numel() for c in chunks.values()],
        )
        for name, audio in zip(chunks, out.multimodal_outputs["model_outputs"], strict=True):
            pieces[name].append(audio)
    for name, codes in (("x", a), ("y", b)):
        audio = torch.cat(pieces[name])
        assert audio.numel() == codes.shape[1] * SAMPLES_PER_FRAME
        assert (audio - whole_decode(model, codes)).abs().max().item() <= TOLERANCE


def test_streams_in_step_are_decoded_as_one_batch_and_each_keeps_its_audio(
    model: Qwen3TTSCode2Wav, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three streams started together, as concurrent requests arrive: each step gives
    # all three as many new frames, so each step's convolutions run once on a batch.
    batches: list[int] = []
    quantizer = model.decoder.quantizer
    decode = quantizer.decode
    monkeypatch.setattr(
        quantizer, "decode", lambda codes: batches.append(len(codes)) or decode(codes)
    )
    streams = {f"s{i}": random_codes(31, seed=10 + i) for i in range(3)}
    pieces: dict[str, list[torch.Tensor]] = {name: [] for name in streams}
    start = 0
    for size in (1, 10, 10, 10):
        infos = [
            {
                "codes": {"audio": codes[:, start : start + size].reshape(-1)},
                "meta": {"request_id": name, "finished": torch.tensor(start + size == 31)},
            }
            for name, codes in streams.items()
        ]
        out = model.forward(
            input_ids=torch.zeros(3 * QUANTIZERS * size, dtype=torch.long),
            runtime_additional_information=infos,
            request_ids=list(streams),
            seq_token_counts=[QUANTIZERS * size] * 3,
        )
        for name, audio in zip(streams, out.multimodal_outputs["model_outputs"], strict=True):
            pieces[name].append(audio)
        start += size
    assert batches == [3, 3, 3, 3]
    for name, codes in streams.items():
        audio = torch.cat(pieces[name])
        assert audio.numel() == 31 * SAMPLES_PER_FRAME
        assert (audio - whole_decode(model, codes)).abs().max().item() <= TOLERANCE


def test_bfloat16_stream_stays_within_bf16_rounding_of_the_whole_decode(
    checkpoint: Path,
) -> None:
    # bf16 keeps 8 significant bits (relative step 7.8e-3): the streamed and the
    # whole decode round differently at every layer, measured 0.3 % of the signal's
    # RMS here (1.8e-2 peak on the 0.6B codec). 2 % of the RMS allows that and
    # still fails a state carried wrongly: dropping the transposed convolutions'
    # carried input alone costs 8.6 %.
    bf16 = load_code2wav(checkpoint)
    bf16.decoder.to(torch.bfloat16).precompute_snake_caches()
    assert stream.install_streaming_decode(bf16)
    codes = random_codes(sum(CHUNKS), seed=7)
    audio = torch.cat(stream_chunks(bf16, "bf16", codes, CHUNKS))
    whole = whole_decode(bf16, codes).float()
    error = (audio - whole).pow(2).mean().sqrt() / whole.pow(2).mean().sqrt()
    assert error.item() <= 2e-2


def test_state_is_freed_when_a_request_finishes_or_is_aborted(model: Qwen3TTSCode2Wav) -> None:
    codes = random_codes(26)
    send_chunk(model, "done", codes[:, :1], False)
    send_chunk(model, "aborted", codes[:, :1], False)
    assert stream.STATE_KEY in model._decoder_state_cache["done"]
    send_chunk(model, "done", codes[:, 1:], True)
    assert "done" not in model._decoder_state_cache
    model.on_requests_finished({"aborted"})  # what the runner calls for an abort
    assert "aborted" not in model._decoder_state_cache


def test_recompute_setting_keeps_the_stock_decode(checkpoint: Path) -> None:
    # Not installed, the model decodes on vLLM-Omni's path: whole frames, close
    # to (not within float rounding of) the whole decode.
    stock = load_code2wav(checkpoint)
    codes = random_codes(51)
    pieces = [send_chunk(stock, "stock", codes[:, :1], False)]
    assert "suffix_quantized" in stock._decoder_state_cache["stock"]  # vLLM-Omni's own state
    assert stream.STATE_KEY not in stock._decoder_state_cache["stock"]
    pieces += [send_chunk(stock, "stock", codes[:, 1:26], False)]
    pieces += [send_chunk(stock, "stock", codes[:, 26:], True)]
    assert [piece.numel() for piece in pieces] == [n * SAMPLES_PER_FRAME for n in (1, 25, 25)]
    assert (torch.cat(pieces) - whole_decode(stock, codes)).abs().max().item() < 1e-2


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.01)])
@pytest.mark.parametrize(
    "c_in,c_out,kernel,stride", [(48, 24, 16, 8), (24, 12, 10, 5), (8, 4, 3, 3)]
)
def test_transposed_conv_as_a_product_equals_torchs(dtype, tolerance, c_in, c_out, kernel, stride):
    from omni_cpu.models.code2wav import _transposed_conv

    torch.manual_seed(kernel)
    conv = torch.nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride).to(dtype)
    for length in (1, 7):
        x = torch.randn(2, c_in, length).to(dtype)
        with torch.no_grad():
            got = _transposed_conv(conv, x)
            want = torch.nn.functional.conv_transpose1d(
                x.float(), conv.weight.float(), conv.bias.float(), stride=stride
            )
        assert got.shape == want.shape and got.dtype == dtype
        assert float((got.float() - want).norm() / want.norm()) < tolerance


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.01)])
@pytest.mark.parametrize(
    "c_in,c_out,kernel,stride", [(48, 24, 16, 8), (24, 12, 10, 5), (32, 16, 6, 3)]
)
def test_transposed_conv_as_a_stride_one_conv_gives_the_new_inputs_outputs(
    dtype, tolerance, c_in, c_out, kernel, stride
):
    # Time-major [tail | x] in, the outputs of x's inputs out, as the stream asks: torch's
    # transposed convolution of the whole, from the tail's strides to the new inputs' last.
    from omni_cpu.models.code2wav import _strided_outputs

    torch.manual_seed(stride)
    conv = torch.nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride).to(dtype)
    keep = kernel // stride - 1
    for length in (1, 7, 40):
        full = torch.randn(2, keep + length, c_in).to(dtype)
        with torch.no_grad():
            got = _strided_outputs(conv, full)
            whole = torch.nn.functional.conv_transpose1d(
                full.transpose(1, 2).float(), conv.weight.float(), conv.bias.float(), stride=stride
            )
        want = whole[..., keep * stride : (keep + length) * stride].transpose(1, 2)
        assert got.shape == want.shape and got.dtype == dtype
        assert float((got.float() - want).norm() / want.norm()) < tolerance


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.01)])
@pytest.mark.parametrize("packed_from", [0, 1 << 40], ids=["packed", "channels-last"])
def test_convolution_equals_conv1d_over_changing_shapes(
    dtype, tolerance, packed_from, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every call, whether its shape runs unpacked, is packed on this call, was packed before,
    # or was dropped from the packs, gives torch's convolution; at most PACKED_SHAPES are kept.
    from omni_cpu.models import code2wav

    monkeypatch.setattr(code2wav, "PACKED_MIN_WEIGHTS", packed_from)
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(24, 40, 7, dilation=3).to(dtype)
    lengths = [19 + 3 * step for step in range(code2wav.PACKED_SHAPES + 2)]
    # The last length comes most often at the end: it takes a rarer shape's place.
    for length in [*lengths, lengths[0], lengths[-1], lengths[-1]]:
        for _ in range(3):
            x = torch.randn(2, length, 24).to(dtype)  # time-major
            with torch.no_grad():
                got = code2wav._conv(conv, x)
                want = torch.nn.functional.conv1d(
                    x.transpose(1, 2).float(), conv.weight.float(), conv.bias.float(), dilation=3
                ).transpose(1, 2)
            assert got.shape == want.shape and got.is_contiguous()
            assert float((got.float() - want).norm() / want.norm()) < tolerance
    packs = conv.__dict__.get("_omni_cpu_packs", {})
    assert len(packs) == (code2wav.PACKED_SHAPES if packed_from == 0 else 0)
    assert all(pack is not None for pack in packs.values())
    packed_lengths = {shape[1] for shape, _, _ in packs}
    assert packed_from or {lengths[0], lengths[-1]} <= packed_lengths


def test_snake_without_the_kernel_gives_the_kernels_result(
    model: Qwen3TTSCode2Wav, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where no kernel module runs (OMNI_CPU_GEMV=off, a CPU without AVX2), the module's own
    # forward and a concatenation stand in: the same values, the same layout.
    from omni_cpu.kernels import gemv
    from omni_cpu.models.code2wav import _snake

    act = model.decoder.decoder[1].block[0]
    channels = act.alpha.shape[0]
    x = torch.randn(2, 33, channels)
    tail = torch.randn(2, 6, channels)
    fused = _snake(act, x, tail)
    monkeypatch.setattr(gemv, "snake_beta", lambda *args: None)
    plain = _snake(act, x, tail)
    assert plain.shape == fused.shape == (2, 39, channels)
    assert (plain - fused).abs().max().item() <= 1e-5


def test_the_planner_counts_the_packed_weights_the_stage_keeps() -> None:
    # The stage's memory in the plan (plan/costs.py) holds as many packed copies as the decode
    # keeps, of as many weights as the 12 Hz codec's packed convolutions have.
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as tokenizer_config,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as tokenizer_model,
    )

    from omni_cpu.checkpoint.configs import speech_tokenizer_config
    from omni_cpu.plan import costs

    assert costs.CODE2WAV_PACKED_COPIES == stream.PACKED_SHAPES
    config = tokenizer_config.Qwen3TTSTokenizerV2Config(**speech_tokenizer_config("0.6b"))
    decoder = tokenizer_model.Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    packed = sum(
        module.weight.numel()
        for module in decoder.modules()
        if isinstance(module, torch.nn.Conv1d | torch.nn.ConvTranspose1d)
        and module.groups == 1
        and module.weight.numel() >= stream.PACKED_MIN_WEIGHTS
    )
    assert abs(packed - costs.CODE2WAV_PACKED_WEIGHTS) <= 0.02 * packed


def test_packs_of_replaced_weights_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A decoder moved to another dtype (or given new weights) packs its new weights and keeps
    # none of the old ones' copies.
    from omni_cpu.models import code2wav

    monkeypatch.setattr(code2wav, "PACKED_MIN_WEIGHTS", 0)
    conv = torch.nn.Conv1d(16, 16, 3)
    x = torch.randn(1, 20, 16)
    with torch.no_grad():
        for _ in range(3):
            code2wav._conv(conv, x)
        conv.to(torch.bfloat16)
        for _ in range(3):
            got = code2wav._conv(conv, x.to(torch.bfloat16))
    assert {dtype for _, dtype, _ in conv.__dict__["_omni_cpu_packs"]} == {torch.bfloat16}
    want = torch.nn.functional.conv1d(x.transpose(1, 2), conv.weight.float(), conv.bias.float())
    assert float((got.float() - want.transpose(1, 2)).norm() / want.norm()) < 0.01
