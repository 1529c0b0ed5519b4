"""benchmarks/vs_reference.py: its figures, and the commands both sides are given.

Nothing here runs the reference or a model: the figures are computed on small arrays.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from tests.helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    sys.path.insert(0, str(REPO / "benchmarks"))  # as when run: it imports compare_qwen_tts
    try:
        return load_script("benchmarks/vs_reference.py")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


vs = _load()


def test_equal_samples_have_infinite_snr_and_one_lsb_of_noise_about_90_db() -> None:
    wave = 0.5 * np.sin(np.linspace(0, 100, 24000)).astype(np.float32)
    assert math.isinf(vs.snr_db(wave, wave.copy()))
    assert 80 < vs.snr_db(wave, vs.as_pcm16(wave)) < 110
    assert vs.max_lsb(vs.as_pcm16(wave), vs.as_pcm16(wave + 1.5 / 32767)) in (1, 2)


def test_codes_agree_per_codebook_and_name_the_first_frame_that_differs() -> None:
    want = np.arange(4 * 16).reshape(4, 16)
    got = want.copy()
    got[2, 5] = -1
    figures = vs.code_agreement(want, got)
    assert figures["first_divergence"] == 2
    assert figures["per_codebook"][5] == 0.75 and figures["per_codebook"][0] == 1.0
    assert vs.code_agreement(want, want)["first_divergence"] is None


def test_both_sides_get_the_same_voice_text_frames_and_penalty(tmp_path: Path) -> None:
    args = vs.parse_args(["--model", "ckpt", "--frames", "12", "--repetition-penalty", "1.05"])
    reference = vs.reference_command(args, tmp_path / "ref.npz")
    _, run = vs.engine_commands(args, tmp_path / "p.yaml", tmp_path / "o.wav")
    for command in (reference, run):
        assert command[command.index("--speaker") + 1] == "ryan"
        assert command[command.index("--text") + 1] == vs.DEFAULT_TEXT
        assert command[command.index("--repetition-penalty") + 1] == "1.05"
    assert run[run.index("--max-frames") + 1] == reference[reference.index("--frames") + 1]
    assert "--greedy" in run


def test_a_quantized_run_compares_against_float32_beside_bf16_rounding(tmp_path: Path) -> None:
    args = vs.parse_args(["--model", "ckpt", "--frames", "12", "--weights", "int8"])
    float32 = vs.reference_command(args, tmp_path / "a.npz", "float32")
    bf16 = vs.reference_command(args, tmp_path / "b.npz", "bfloat16")
    assert float32[float32.index("--dtype") + 1] == "float32"
    assert bf16[bf16.index("--dtype") + 1] == "bfloat16"
    codes = np.arange(4 * 16).reshape(4, 16)
    forced = {"layer0": 1.0, "residual": 0.5}
    agreement = vs.code_agreement(codes, codes)
    result = {
        "date": "2026-12-03 10:00 UTC",
        "machine": {"architecture": "x86_64", "model_name": "CPU", "usable_cpu_count": 2,
                    "isa": []},
        "settings": {"model": "ckpt", "text": "Hi.", "voice": "--speaker ryan", "language": "Auto",
                     "frames": 4, "dtype": "float32", "weights": "int8", "repetition_penalty": 1.0},
        "reference": {"qwen_tts": "0.1.1"},
        "codes": {
            "quantized": {"free_running": agreement, "teacher_forced": forced},
            "omni_cpu_bfloat16": {"free_running": agreement, "teacher_forced": forced},
            "reference_bfloat16": {"free_running": vs.code_agreement(codes, codes + 1)},
        },
        "commands": [],
    }  # fmt: skip
    section = vs.quantized_section(result)
    assert "| omni-cpu int8 | omni-cpu bf16 | qwen-tts bf16 |" in section
    assert "| teacher-forced residual codes = reference | 50.00% | 50.00% | — |" in section
    assert "| first differing frame | none | none | 0 |" in section
