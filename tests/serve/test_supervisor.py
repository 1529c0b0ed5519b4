"""One server per port: a port in use is refused before anything starts, folders are per
process, and a drain survives its folder being gone. No engine starts here."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omni_cpu.errors import PortInUseError
from omni_cpu.profile import load_profile
from omni_cpu.serve.command import ServeOptions, build_serve_plan
from omni_cpu.serve.supervisor import Supervisor, check_port_free, listens_on, sweep_workdirs
from tests.helpers.engines import OMNI_CPU

REPO = Path(__file__).resolve().parents[2]
PROFILE = next((REPO / "profiles").glob("*.yaml"))


def _listener() -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_port_something_listens_on_is_refused():
    with _listener() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port)  # free again once it closed


def test_serve_on_a_port_in_use_is_one_line_and_exit_2_before_any_engine(
    tiny_checkpoint: Path,
    tmp_path: Path,
):
    with _listener() as taken:
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [OMNI_CPU, "serve", "--model", str(tiny_checkpoint), "--host", "127.0.0.1",
             "--port", str(port)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0]
    assert time.monotonic() - started < 60
    assert list(tmp_path.iterdir()) == []  # no work folder made, none removed


def test_a_live_servers_folder_is_never_swept(tmp_path: Path):
    mine = tmp_path / f"omni-cpu-serve-8000-{os.getpid()}"
    live = tmp_path / f"omni-cpu-serve-8000-{os.getppid()}"
    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        gone.wait()
    dead = tmp_path / f"omni-cpu-serve-8000-{gone.pid}"
    for folder in (mine, live, dead):
        folder.mkdir()
        (folder / "draining").touch()
    assert sweep_workdirs(mine) == [dead]
    assert mine.is_dir() and live.is_dir() and not dead.exists()


def test_ready_means_our_own_process_listens_on_the_port():
    with _listener() as taken:
        port = taken.getsockname()[1]
        assert listens_on(os.getpid(), port)
        with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
            try:
                assert not listens_on(other.pid, port)
            finally:
                other.kill()


def test_drain_survives_its_folder_being_removed(tmp_path: Path):
    plan = build_serve_plan(
        "m", load_profile(PROFILE), ServeOptions(port=1, workdir=tmp_path / "gone")
    )
    log = io.StringIO()
    supervisor = Supervisor(plan, log)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        supervisor.child = child  # type: ignore[assignment]
        try:
            supervisor._drain()  # nothing answers on port 1: nothing in flight
        finally:
            child.kill()
    assert "stopping the server" in log.getvalue()


def test_an_api_server_the_oom_killer_took_is_named_not_a_stage():
    from omni_cpu.serve.supervisor import server_exit_error

    oom = "; the kernel's OOM killer ran (memory limit 3 GiB)"
    line = server_exit_error(-9, 4242, oom).one_line()
    assert line.startswith("the kernel's OOM killer killed the vLLM-Omni API server (pid 4242)")
    assert "(memory limit 3 GiB)" in line and "stage" not in line.split("(")[0]
    assert "--weights int4" in line


def test_an_api_server_that_exited_without_the_oom_killer_says_its_code():
    from omni_cpu.serve.supervisor import server_exit_error

    assert "exited with code -9" in server_exit_error(-9, 1, "").one_line()
    assert "exited with code 1" in server_exit_error(1, 1, "; the kernel's OOM ...").one_line()
