"""The talker stage's load gives vLLM-Omni's stock codes, for every code-predictor mode.

Greedy, float32, on tiny checkpoints of every kind with 1 KV head (tiny's own) and with 8
(the published models'): omni-cpu's load of the talker (its kernels, fused norms and
KV-cached code predictor, as the stage loads it) and vLLM-Omni's stock model code, both in
this process, choose the same 16 codes for every frame. The stock code matches the official
qwen-tts bit for bit in float32 (benchmarks/vs_reference.py); the engines' own run of the
same load is tests/e2e/test_stock_agreement_run.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch

from omni_cpu.models import fused_predictor
from omni_cpu.platform.inprocess import load_talker
from omni_cpu.quality.check_weights import free_run
from omni_cpu.speech import ref_audio
from omni_cpu.speech.request import SpeechRequest

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

FRAMES = 4
# The code predictor's choices, and fused's own fallback where this vLLM build lacks its
# fused CPU kernels (float32 here: fused runs them, not the one-call step).
MODES = ("stock", "fused", "fused without vLLM's fused kernels")
KINDS = ("custom-voice", "voice-design", "base")
TEXT = "Hello there. This is a test."


def request(kind: str) -> SpeechRequest:
    """One utterance of `kind`'s task type, Base cloning a 2 s tone with its transcript."""
    if kind == "custom-voice":
        return SpeechRequest(TEXT, speaker="ryan", max_frames=FRAMES)
    if kind == "voice-design":
        return SpeechRequest(TEXT, instruct="A deep, calm voice.", task_type="VoiceDesign")
    rate = 24000
    t = np.arange(2 * rate) / rate
    tone = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    voice = ref_audio.from_samples("tone.wav", tone, rate)
    return SpeechRequest(TEXT, task_type="Base", ref_audio=voice, ref_text="A calm tone.")


@pytest.fixture(scope="module")
def checkpoints(
    tiny_kinds: dict[str, Path], tiny_kinds_8kv: dict[str, Path]
) -> dict[tuple[str, int], Path]:
    return {
        **{(kind, 1): path for kind, path in tiny_kinds.items()},
        **{(kind, 8): path for kind, path in tiny_kinds_8kv.items()},
    }


@pytest.mark.parametrize("kv_heads", [1, 8])
@pytest.mark.parametrize("kind", KINDS)
def test_every_code_predictor_mode_gives_the_stock_codes(
    checkpoints, kind: str, kv_heads: int, monkeypatch
) -> None:
    checkpoint = checkpoints[(kind, kv_heads)]
    info = request(kind).additional_information()
    want, _ = free_run(load_talker(checkpoint, "model", "float32", stock=True), info, FRAMES)
    assert want.shape == (FRAMES, 16)
    for mode in MODES:
        with monkeypatch.context() as patch:
            patch.setenv("OMNI_CPU_CODE_PREDICTOR", mode.split()[0])
            if mode.endswith("kernels"):  # as on a vLLM build without them: the eager forward
                patch.setattr(fused_predictor, "fused_supported", lambda dtype: False)
            talker = load_talker(checkpoint, "model", "float32")
            got, _ = free_run(talker, info, FRAMES)
        assert torch.equal(got, want), f"{mode}: {got.tolist()} != {want.tolist()}"
