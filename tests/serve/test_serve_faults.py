"""`omni-cpu serve` with a dead stage: it says which, and exits 4 for a supervisor to restart it.

One server start (tiny checkpoint, about a minute on 2 cores); the talker's stage
process is killed once it is ready. Each stage is one process: its worker runs inside
its engine core (vLLM's "uni" executor, omni_cpu.platform.DRIVER_ENV).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_cpu.process import proctree
from tests.helpers.engines import needs_runtime
from tests.helpers.leftovers import SHM, eventually, new_shm_entries
from tests.helpers.serving import Server, get, post_json, serving, start_server

pytestmark = [pytest.mark.e2e, needs_runtime]

# `with served(running):` from the server ready to its whole tree stopped, however it ends.
served = contextlib.contextmanager(serving)


def talker_process(root: int) -> int:
    for pid in proctree.descendants(root):
        if "EngineCore" in proctree.command_line(pid) and "stage0" in proctree.command_line(pid):
            return pid
    raise AssertionError("no talker engine core")


@contextlib.contextmanager
def talker_stopped(root: int) -> Iterator[tuple[int, float]]:
    """The talker's engine core stopped (SIGSTOP) for the block: (its pid, when it stopped).

    Resumed afterwards however the block ends, so the server's tree can be stopped.
    """
    victim = talker_process(root)
    os.kill(victim, signal.SIGSTOP)
    try:
        yield victim, time.monotonic()
    finally:
        with contextlib.suppress(OSError):
            os.kill(victim, signal.SIGCONT)


def health_naming_the_talker(running: Server, since: float, within_s: float = 60) -> str | None:
    """/health, polled until the server exits or `within_s` after `since`: the message of
    its last 503 that names the talker's engine core (None if none did)."""
    named = None
    while running.process.poll() is None and time.monotonic() - since < within_s:
        try:
            status, body = get(running.url("/health"), 2.0)
        except OSError:
            status, body = None, ""
        if status == 503 and "stage 0 (talker) engine core" in body:
            named = json.loads(body)["error"]["message"]
        time.sleep(0.2)
    return named


def test_a_killed_stage_is_named_by_health_and_the_server_exits_4(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    shm_before = set(os.listdir(SHM))
    running = start_server(tiny_checkpoint, tmp_path / "serve.log", "--max-frames", "12")
    server, log = running.process, running.log
    with served(running):
        tree = [server.pid, *proctree.descendants(server.pid)]
        victim = talker_process(server.pid)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        named = health_naming_the_talker(running, since=killed_at)
        assert server.wait(timeout=60) == 4, log.read_text()[-4000:]
        assert time.monotonic() - killed_at < 60
        assert named is not None and f"pid {victim}" in named
        assert f"stage 0 (talker) engine core pid {victim} died" in log.read_text()
        assert proctree.wait_gone(tree, 5.0) == []

        # The semaphore the killed stage held among them (its run's ledger lists it).
        def left() -> list[str]:
            return new_shm_entries(shm_before, tree)

        assert eventually(lambda: not left()), left()


def test_a_hung_stage_fails_requests_and_health_and_the_server_exits_4(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    import threading

    shm_before = set(os.listdir(SHM))
    # The server's $TMPDIR: its folder, vLLM's sockets, all inside. Short, as /tmp is: a
    # socket's path holds 107 bytes, and pytest's folders are long.
    temp = Path(tempfile.mkdtemp(prefix="oc-"))
    env = {**os.environ, "OMNI_CPU_STAGE_STALL_S": "4", "TMPDIR": str(temp)}
    running = start_server(tiny_checkpoint, tmp_path / "serve.log", "--max-frames", "12", env=env)
    server, log = running.process, running.log
    tree: list[int] = []
    with served(running), talker_stopped(server.pid) as (victim, stopped_at):
        tree = [server.pid, *proctree.descendants(server.pid)]
        answer: list[tuple[int, bytes]] = []
        speech = {"model": str(tiny_checkpoint), "input": "Hello.", "voice": "ryan"}
        url = running.url("/v1/audio/speech")
        asking = threading.Thread(target=lambda: answer.append(post_json(url, speech, 60)))
        asking.start()
        named = health_naming_the_talker(running, since=stopped_at)
        asking.join(30)
        assert server.wait(timeout=60) == 4, log.read_text()[-4000:]
        assert named is not None and f"pid {victim}" in named and "no progress" in named
        assert answer and answer[0][0] == 503, answer  # an error status, not a hang
        assert time.monotonic() - stopped_at < 40
        assert "Traceback" not in log.read_text()
    # Nothing left behind by a stage fault: not the connector's lock files in /dev/shm (the
    # sweep missed vLLM's 16-hex request ids), not the sockets vLLM made in $TMPDIR.
    assert proctree.wait_gone(tree, 10.0) == []
    assert eventually(lambda: not new_shm_entries(shm_before, tree)), new_shm_entries(
        shm_before, tree
    )
    assert eventually(lambda: not list(temp.iterdir())), list(temp.iterdir())
    temp.rmdir()


def test_a_stage_hung_under_websocket_and_batch_work_closes_1011_and_answers_503(
    tiny_checkpoint: Path, tmp_path: Path
):
    """Only WebSocket and batch work in flight: the watch sees it, and each door says why."""
    import threading

    ws_client = pytest.importorskip("websockets.sync.client")
    from websockets.exceptions import ConnectionClosed

    env = {**os.environ, "OMNI_CPU_STAGE_STALL_S": "4"}
    # Places for both the utterance and the batch, whatever the plan predicts it carries.
    running = start_server(
        tiny_checkpoint,
        tmp_path / "serve.log",
        "--max-frames",
        "400",
        "--max-in-flight",
        "4",
        env=env,
    )
    server, log = running.process, running.log
    with served(running):
        model = str(tiny_checkpoint)
        session = ws_client.connect(f"ws://127.0.0.1:{running.port}/v1/audio/speech/stream")
        session.send(json.dumps({"type": "session.config", "model": model, "voice": "ryan"}))
        session.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        session.send(json.dumps({"type": "input.done"}))
        session.recv(timeout=120)  # the utterance is under way
        with talker_stopped(server.pid) as (victim, stopped_at):
            answer: list[tuple[int, bytes]] = []
            batch = {"model": model, "voice": "ryan", "items": [{"input": "Hi."}]}
            url = running.url("/v1/audio/speech/batch")
            asking = threading.Thread(target=lambda: answer.append(post_json(url, batch, 60)))
            asking.start()
            closed = None
            try:
                while time.monotonic() - stopped_at < 60:
                    session.recv(timeout=60)
            except ConnectionClosed as gone:
                closed = gone.rcvd
            asking.join(60)
            assert server.wait(timeout=60) == 4, log.read_text()[-4000:]
            assert closed is not None and closed.code == 1011, closed
            assert f"pid {victim}" in closed.reason and "no progress" in closed.reason
            assert answer and answer[0][0] == 503, answer
            assert time.monotonic() - stopped_at < 40
