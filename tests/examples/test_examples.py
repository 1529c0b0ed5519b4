"""Every script in examples/ runs: --help, a dry run on tiny checkpoints of each kind, and
one offline voice clone with real engines (the others need a server or minutes more).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
import tomllib
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


def test_no_example_imports_a_private_module():
    """Examples import omni-cpu's public face (omni_cpu.api), never the rooms behind it."""
    for path in EXAMPLES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("omni_cpu"):
                names = {alias.name for alias in node.names}
                assert (node.module, names) in (("omni_cpu", {"api"}), ("omni_cpu.api", names))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name in ("omni_cpu.api",) or not alias.name.startswith("omni_cpu")


def test_every_library_an_example_needs_is_declared():
    """Beyond the standard library and omni-cpu's own dependencies, the `examples` extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        re.split(r"[<>=!~\[ ]", requirement)[0].lower().replace("-", "_")
        for requirement in [*project["dependencies"], *project["optional-dependencies"]["examples"]]
    }
    for path in EXAMPLES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in ("omni_cpu", "__future__"):
                    continue
                assert top in declared, f"{path.name} imports {top}, not declared"
    assert "openai" in declared


def test_the_api_loads_no_runtime():
    code = (
        "import sys\nfrom omni_cpu import api\n"
        "print([m for m in ('torch', 'vllm', 'vllm_omni') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize(
    ("args", "task"),
    [
        ((), "CustomVoice"),
        (("--voice", "vivian", "--instructions", "Cheerfully."), "CustomVoice"),
        (("--instructions", "A deep, calm voice."), "VoiceDesign"),
        (("--voice", "vivian", "--instructions", "Calm.", "--task-type", "VoiceDesign"),
         "VoiceDesign"),
    ],
)  # fmt: skip
def test_openai_client_sends_the_task_type_its_options_mean(args, task):
    done = example("openai_client.py", *args, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["task_type"] == task


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
    kinds = [doc["kind"] for doc in yaml.safe_load_all(done.stdout) if doc]
    assert kinds == ["Deployment", "Service"]


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


def test_stream_latency_waits_for_retry_after_on_429(tmp_path):
    """Below the server: a stub that refuses the first speech request with 429, Retry-After 1."""
    import http.server
    import threading

    calls: list[float] = []

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # /v1/models
            body = json.dumps({"data": [{"id": "stub"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # /v1/audio/speech
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(time.monotonic())
            if len(calls) == 1:
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", "4800")
            self.end_headers()
            self.wfile.write(b"\0" * 4800)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = example("stream_latency.py", "--url", url, "--concurrency", "1", timeout_s=60)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert "1 waited for a 429's Retry-After" in done.stdout
    assert len(calls) == 2 and calls[1] - calls[0] >= 1.0
