"""`omni-cpu check-weights` end to end on the tiny Base checkpoint: one real run, read back.

The checkpoint's dtype checked against itself must give KL 0 and agreement 1
everywhere (the teacher-forced run feeds the same frames at the same
positions); int8 must give figures, each in its range. Base, so the speaker
encoder's cosine is computed too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.engines import needs_runtime

pytestmark = [pytest.mark.cpu, needs_runtime]

OMNI_CPU = str(Path(sys.executable).with_name("omni-cpu"))
FRAMES = 6
TEXT = "Hello there, this is a check."


def omni_cpu(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OMNI_CPU, *args], capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ)
    )


@pytest.fixture(scope="module")
def reference_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import soundfile

    t = np.arange(2 * 24_000) / 24_000
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    path = tmp_path_factory.mktemp("ref") / "voice.wav"
    soundfile.write(str(path), tone.astype(np.float32), 24_000)
    return path


@pytest.fixture(scope="module")
def checked(
    tiny_kinds: dict[str, Path], reference_wav: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict, Path]:
    plot = tmp_path_factory.mktemp("plot") / "divergence.png"
    done = omni_cpu(
        "check-weights",
        "--model", str(tiny_kinds["base"]),
        "--weights", "model,int8",
        "--text", TEXT,
        "--ref-audio", str(reference_wav),
        "--ref-text", "A steady tone for a voice.",
        "--frames", str(FRAMES),
        "--json",
        "--plot", str(plot),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), plot


def test_the_reference_against_itself_changes_nothing(checked: tuple[dict, Path]) -> None:
    same = checked[0]["formats"]["model"]
    assert same["frames"] == FRAMES
    assert same["logit_kl_max"] == 0.0
    assert same["top1_agreement"] == 1.0
    assert same["codes_equal"] == same["frames_all_equal"] == 1.0
    assert same["log_mel_db_mean"] == 0.0
    assert same["speaker_cosine"] == pytest.approx(1.0, abs=1e-4)


def test_int8_figures_are_computed_and_in_range(checked: tuple[dict, Path]) -> None:
    data = checked[0]
    int8 = data["formats"]["int8"]
    assert int8["frames"] == FRAMES
    assert sum(int8["kernels"].values()) > 0  # its linears ran on an int8 kernel
    assert 0.0 <= int8["logit_kl_mean"] <= int8["logit_kl_max"] < math.inf
    for share in ("top1_agreement", "codes_equal", "frames_all_equal"):
        assert 0.0 <= int8[share] <= 1.0
    assert int8["codes_equal"] < 1.0  # int8 rounding flips some residual codes (random weights)
    assert int8["log_mel_db_mean"] > 0.0
    assert -1.0 <= int8["speaker_cosine"] <= 1.0
    (utterance,) = int8["utterances"]
    assert utterance["text"] == TEXT
    per_frame = utterance["per_frame"]
    assert len(per_frame["logit_kl"]) == len(per_frame["top1_equal"]) == FRAMES
    assert len(per_frame["log_mel_db"]) == FRAMES


def test_random_weights_are_said(checked: tuple[dict, Path]) -> None:
    data = checked[0]
    assert data["random_weights"] is True
    assert "random weights" in data["note"]
    assert data["teacher_forced"] is True and data["greedy"] is True


def test_the_plot_is_a_png(checked: tuple[dict, Path]) -> None:
    assert checked[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_shows_every_format_and_figure(checked: tuple[dict, Path]) -> None:
    from rich.console import Console

    from omni_cpu.cli.check_weights_cmd import ROWS, _table

    console = Console(record=True, width=120)
    console.print(_table(checked[0]))
    shown = console.export_text()
    assert "model" in shown and "int8" in shown
    for label, _, _ in ROWS:
        assert label in shown


def test_an_unknown_format_is_a_one_line_error(tiny_kinds: dict[str, Path]) -> None:
    done = omni_cpu("check-weights", "--model", str(tiny_kinds["custom-voice"]), "--weights", "fp4")
    assert done.returncode == 2
    assert "--weights 'fp4'" in done.stderr and "use one of" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_help_says_the_runs_are_greedy_and_teacher_forced() -> None:
    done = omni_cpu("check-weights", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "teacher-forced" in text and "greedy" in text
    assert "every quantized one (int8" in text


def test_an_unknown_dtype_is_a_one_line_error(tiny_kinds: dict[str, Path]) -> None:
    done = omni_cpu("check-weights", "--model", str(tiny_kinds["custom-voice"]), "--dtype", "fp16")
    assert done.returncode == 2
    assert "--dtype 'fp16'" in done.stderr and "bfloat16" in done.stderr
