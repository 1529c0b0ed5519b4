"""Every script in examples/ runs: --help, a dry run on tiny checkpoints of each kind, and
one offline voice clone with real engines (the others need a server or minutes more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.helpers.engines import needs_runtime

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PYTHON_EXAMPLES = sorted(path.name for path in EXAMPLES.glob("*.py"))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def example(name: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    command = (
        [sys.executable, str(EXAMPLES / name)] if name.endswith(".py") else [str(EXAMPLES / name)]
    )
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=ENV, timeout=timeout_s, cwd=REPO
    )


@pytest.fixture(scope="module")
def checkpoints(tiny_kinds: dict[str, Path]) -> dict[str, Path]:
    return tiny_kinds


@pytest.fixture(scope="module")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import soundfile

    t = np.arange(48000) / 24000
    path = tmp_path_factory.mktemp("voice") / "voice.wav"
    soundfile.write(str(path), 0.3 * np.sin(2 * np.pi * 180 * t), 24000, subtype="PCM_16")
    return path


def test_the_examples_are_the_ones_the_readme_promises():
    assert PYTHON_EXAMPLES == [
        "offline_tts.py",
        "openai_client.py",
        "stream_latency.py",
        "stream_to_wav.py",
    ]
    assert (EXAMPLES / "deploy_k8s.sh").stat().st_mode & 0o111


@pytest.mark.parametrize("name", PYTHON_EXAMPLES)
def test_each_example_explains_itself(name):
    done = example(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


@pytest.mark.parametrize(
    ("kind", "args", "task"),
    [
        ("custom-voice", ("--speaker", "vivian"), "CustomVoice"),
        ("voice-design", ("--instruct", "A deep, calm voice."), "VoiceDesign"),
        ("base", ("--ref-audio", "VOICE", "--ref-text", "A test clip."), "Base"),
    ],
)
def test_offline_dry_run_plans_each_task_type(checkpoints, voice_wav, kind, args, task):
    args = tuple(str(voice_wav) if a == "VOICE" else a for a in args)
    done = example("offline_tts.py", "--model", str(checkpoints[kind]), "--dry-run", *args)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["task_type"] == task and len(plan["stages"]) == 2


def test_offline_example_refuses_a_mismatch_in_one_line(checkpoints):
    done = example("offline_tts.py", "--model", str(checkpoints["base"]), "--dry-run")
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error:") and "--ref-audio" in done.stderr


def test_stream_to_wav_dry_run(checkpoints):
    done = example("stream_to_wav.py", "--model", str(checkpoints["custom-voice"]), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["task_type"] == "CustomVoice"


def test_openai_client_dry_run_sends_the_clone_as_base64(voice_wav):
    done = example(
        "openai_client.py", "--ref-audio", str(voice_wav), "--ref-text", "Hi.", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["task_type"] == "Base" and body["ref_audio"].startswith("data:audio/wav;base64,")
    assert body["stream"] is True


def test_stream_latency_dry_run():
    done = example("stream_latency.py", "--concurrency", "1,4", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["levels"] == [1, 4]


def test_k8s_example_writes_a_deployment_for_a_checked_in_profile():
    profile = next(REPO.glob("profiles/*.yaml"))
    env = {**ENV, "DRY_RUN": "1", "OMNI_CPU": str(Path(sys.executable).with_name("omni-cpu"))}
    done = subprocess.run(
        [str(EXAMPLES / "deploy_k8s.sh"), str(profile)],
        capture_output=True, text=True, env=env, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    documents = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert [doc["kind"] for doc in documents] == ["ConfigMap", "Deployment", "Service"]
    # The image `make image` builds (scripts/image.sh tag).
    tag = subprocess.run(
        ["bash", "scripts/image.sh", "tag"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    assert documents[1]["spec"]["template"]["spec"]["containers"][0]["image"] == tag


@pytest.mark.e2e
@needs_runtime
def test_offline_example_clones_a_voice_with_real_engines(checkpoints, voice_wav, tmp_path):
    out = tmp_path / "clone.wav"
    done = example(
        "offline_tts.py", "--model", str(checkpoints["base"]), "--ref-audio", str(voice_wav),
        "--ref-text", "A test clip.", "--max-frames", "8", "--out", str(out),
        timeout_s=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with wave.open(str(out)) as handle:
        assert handle.getframerate() == 24000 and handle.getnframes() % 1920 == 0
        assert handle.getnframes() > 0
