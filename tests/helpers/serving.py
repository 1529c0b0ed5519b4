"""`omni-cpu serve` started as a user starts it, on loopback, and the plain HTTP calls tests make.

Every server the tests start goes through `start_server` and `serving`: a free
loopback port, the server's output in a log file whose tail a failure shows, and
the whole process tree stopped however the test ends.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from omni_cpu.process import proctree

REPO = Path(__file__).resolve().parents[2]
SAMPLE_RATE = 24_000
FRAME_SAMPLES = 1920  # one 12.5 Hz codec frame at 24 kHz
START_TIMEOUT_S = 900  # two engines load on 2 cores in minutes
REQUEST_TIMEOUT_S = 300


@dataclass
class Server:
    """One `omni-cpu serve` process and where to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    model: str
    log: Path
    startup_log: str = ""  # what the server had printed when /health first answered 200

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def client(self) -> Any:
        """The official `openai` client on this server (tests importorskip it first)."""
        import openai

        return openai.OpenAI(
            base_url=self.url("/v1"), api_key="none", max_retries=0, timeout=REQUEST_TIMEOUT_S
        )

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


# The serve tests' fixture (tests/serve/conftest.py): (kind, max_seqs, *options) -> a
# server ready on a tiny checkpoint, stopped when the module ends.
TinyServer = Callable[..., Server]


# Ports the servers under test listen on: below the kernel's ephemeral range, PORTS_A_WORKER
# for each pytest-xdist worker. A port from bind(0) is ephemeral: released, it may be handed to
# the next outgoing or port-0 socket of any process (an engine's ZMQ socket, another worker's
# server) before our server binds it, and CI once lost a module to EADDRINUSE that way. Below
# the range only an explicit bind takes a port, and the workers' slices do not overlap.
FIRST_TEST_PORT = 20000
PORTS_A_WORKER = 400
_next_offset = itertools.count(os.getpid() % PORTS_A_WORKER)


def worker_index() -> int:
    """This pytest-xdist worker's number (gw3 -> 3); 0 outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


def free_port() -> int:
    """A loopback port free now, in this worker's slice below the ephemeral range."""
    base = FIRST_TEST_PORT + worker_index() * PORTS_A_WORKER
    for _ in range(PORTS_A_WORKER):
        port = base + next(_next_offset) % PORTS_A_WORKER
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {base}..{base + PORTS_A_WORKER - 1}")


def planned_tiny_model(folder: Path, kind: str, max_seqs: int) -> tuple[Path, Path]:
    """A tiny checkpoint of `kind` in `folder` and a profile planned for this machine for it
    (at most `max_seqs` requests at once): (model, profile file)."""
    from omni_cpu.checkpoint.writer import make_checkpoint
    from omni_cpu.plan import plan_for_machine
    from omni_cpu.profile import save_profile

    model = folder / f"tiny-{kind}"
    make_checkpoint("tiny", model, kind=kind)
    _, profile = plan_for_machine(str(model), max_seqs=max_seqs)
    save_profile(profile, folder / "deploy.yaml")
    return model, folder / "deploy.yaml"


def start_server(
    model: Path | str, log: Path, *options: str, env: dict[str, str] | None = None
) -> Server:
    """`omni-cpu serve --model MODEL OPTIONS` on a free loopback port, its output in `log`."""
    port = free_port()
    command = [
        sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), *options,
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    return Server(process, port, str(model), log)


def wait_ready(server: Server, timeout_s: float = START_TIMEOUT_S) -> None:
    """Until /health answers 200; fails with the log's tail if the server exits first."""
    deadline = time.monotonic() + timeout_s
    while get_status(server.url("/health")) != 200:
        if server.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"server did not come up; log tail:\n{server.log_tail()}")
        time.sleep(1)
    server.startup_log = server.log.read_text(errors="replace")


def serving(server: Server) -> Iterator[Server]:
    """A fixture's body: the server once ready; its whole tree stopped afterwards."""
    try:
        wait_ready(server)
        yield server
    finally:
        if server.process.poll() is None:
            proctree.stop_tree(server.process.pid, 60)


def serving_tiny(folder: Path, kind: str, max_seqs: int, *options: str) -> Iterator[Server]:
    """A module fixture's body: `omni-cpu serve OPTIONS` on a tiny `kind` checkpoint with a
    profile planned here for `max_seqs` requests at once (both written in `folder`)."""
    model, profile = planned_tiny_model(folder, kind, max_seqs)
    log = folder / "serve.log"
    yield from serving(start_server(model, log, "--deploy-profile", str(profile), *options))


def get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def get_status(url: str) -> int | None:
    try:
        return get(url, 2.0)[0]
    except OSError:
        return None


def post_json(url: str, body: dict, timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wav_data_url(seconds: float, rate: int = 16000, amplitude: float = 0.3) -> str:
    """`seconds` of a voice-like tone as a base64 WAV data URL."""
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    voice = amplitude * np.sin(2 * np.pi * 180 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))
    buffer = io.BytesIO()
    soundfile.write(buffer, voice, rate, format="WAV", subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()
