"""`omni-cpu run` samples as the user asks: seeded runs repeat, greedy float32 is the stock model.

Five engine runs on tiny checkpoints, 6 frames each (under a minute each on 2 cores):
- `run --seed 7` twice, with the profile's sampling (temperature 0.9, top-k 50): the two
  WAV files are the same bytes, and `--seed 8` writes others;
- `run --greedy` on a float32 profile, with 1 KV head (tiny's own) and with 8 (the published
  models'): the WAV is the stock model's greedy codes (vLLM-Omni's own model code in this
  process, omni_cpu.platform.inprocess) through vLLM-Omni's whole-utterance decoder, within
  the streaming decode's rounding: one different code would change the audio at full scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.audio import FRAME, read_wav
from tests.helpers.engines import Run, needs_runtime, run_omni_cpu

FRAMES = 6
TEXT = "Hello from the CPU."


def _run(model: Path, out: Path, *extra: str) -> Run:
    run = run_omni_cpu(
        "run", "--model", str(model), "--text", TEXT, "--speaker", "vivian",
        "--max-frames", str(FRAMES), "--out", str(out), "--json", *extra,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.mark.e2e
@needs_runtime
def test_a_seeded_run_twice_writes_the_same_bytes(tiny_checkpoint: Path, tmp_path: Path) -> None:
    first, second, other = tmp_path / "first.wav", tmp_path / "second.wav", tmp_path / "8.wav"
    _run(tiny_checkpoint, first, "--seed", "7")
    _run(tiny_checkpoint, second, "--seed", "7")
    _run(tiny_checkpoint, other, "--seed", "8")
    assert first.read_bytes() == second.read_bytes()
    assert other.read_bytes() != first.read_bytes()  # the seed is what decides
    _, _, samples = read_wav(first)
    assert samples.size == FRAMES * FRAME and float(np.abs(samples).max()) > 1e-3


def float32_profile(checkpoint: Path, folder: Path) -> Path:
    """This machine planned for `checkpoint` (its KV heads size the cache), both stages float32."""
    path = folder / "float32.yaml"
    probe = run_omni_cpu(
        "probe", "--model", str(checkpoint), "--dtype", "float32",
        "--code2wav-dtype", "float32", "--output", str(path),
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    return path


def stock_wave(checkpoint: Path) -> np.ndarray:
    """The stock model's greedy float32 frames, decoded whole, as 16-bit WAV samples read back."""
    from omni_cpu.platform.inprocess import Code2Wav, load_talker
    from omni_cpu.quality.check_weights import free_run
    from omni_cpu.speech.request import SpeechRequest
    from omni_cpu.speech.wav import to_pcm16

    talker = load_talker(checkpoint, "model", "float32", stock=True)
    info = SpeechRequest(TEXT, speaker="vivian", max_frames=FRAMES).additional_information()
    codes, _ = free_run(talker, info, FRAMES)
    wave = Code2Wav(checkpoint).decode(codes).numpy()
    return np.frombuffer(to_pcm16(wave), dtype="<i2").astype(np.float32) / 32767.0


@pytest.mark.e2e
@needs_runtime
@pytest.mark.parametrize("kv_heads", [1, 8])
def test_greedy_float32_run_speaks_the_stock_models_codes(
    kv_heads: int, tiny_checkpoint: Path, tiny_kinds_8kv: dict[str, Path], tmp_path: Path
) -> None:
    checkpoint = tiny_checkpoint if kv_heads == 1 else tiny_kinds_8kv["custom-voice"]
    out = tmp_path / "greedy.wav"
    profile = float32_profile(checkpoint, tmp_path)
    _run(checkpoint, out, "--greedy", "--deploy-profile", str(profile))
    _, _, got = read_wav(out)
    want = stock_wave(checkpoint)
    assert got.shape == want.shape == (FRAMES * FRAME,)
    scale = float(np.abs(want).max())
    assert scale > 1e-3
    assert float(np.abs(got - want).max()) <= 3 / 32767, (
        f"max difference {np.abs(got - want).max() * 32767:.0f} LSB of a {scale * 32767:.0f} peak"
    )
