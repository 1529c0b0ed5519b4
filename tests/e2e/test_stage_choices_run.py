"""A profile's stage entry says what its stage runs with: `omni-cpu run` on the tiny checkpoint
with a profile whose talker entry says int8 and no OMNI_CPU_WEIGHTS anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cpu import envs
from omni_cpu.plan.resolve import resolve
from omni_cpu.profile import dump_profile
from tests.helpers.engines import needs_runtime, run_omni_cpu


def int8_talker_profile(checkpoint: Path, folder: Path) -> Path:
    """This machine's planned profile, its talker entry edited by hand to say int8."""
    text = dump_profile(resolve("auto", str(checkpoint), "model").profile)
    assert text.count('weights: "model"') == 1  # the talker's entry, nothing else
    path = folder / "int8-talker.yaml"
    path.write_text(text.replace('weights: "model"', 'weights: "int8"'))
    return path


@needs_runtime
@pytest.mark.e2e
def test_the_talker_entrys_weight_format_is_what_the_talker_stage_loads(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(envs.WEIGHTS.name, raising=False)
    profile = int8_talker_profile(tiny_checkpoint, tmp_path)
    run = run_omni_cpu(
        "run",
        "--model",
        str(tiny_checkpoint),
        "--deploy-profile",
        str(profile),
        "--text",
        "Hello from the CPU.",
        "--speaker",
        "vivian",
        "--max-frames",
        "4",
        "--out",
        str(tmp_path / "hello.wav"),
        "--json",
        env={envs.WEIGHT_CACHE.name: "off"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = run.json()
    assert report["startup"]["stages"]["talker"]["weights"] == "int8"
