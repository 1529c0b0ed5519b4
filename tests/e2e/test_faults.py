"""Faults, as an operator's machine sees them: each ends in its exit code and one line, and
leaves no process, no /dev/shm entry and no partial file behind.

The mistakes (output path, full or read-only disk, text over the talker's context)
are refused before any engine starts: seconds each. The kills start real engines
on the tiny checkpoint (about a minute each on 2 cores) and strike once the engines
are up and synthesizing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from omni_cpu.plan import costs
from omni_cpu.process import proctree
from tests.helpers.engines import OMNI_CPU, live_pids_with_token, needs_runtime
from tests.helpers.leftovers import SHM, eventually, new_shm_entries

# The talker's cap: the tiny checkpoint speaks 400 frames in under 3 s on 2 cores, so a
# shorter run could end before a test strikes it.
LONG_FRAMES = str(costs.TALKER_MAX_FRAMES)


def error_line(stderr: str, *, engines_ran: bool = False) -> str:
    """The one error line omni-cpu prints, last (libraries may log above it; a stage that
    failed logs its own traceback, but a refusal before the engines has none)."""
    if not engines_ran:
        assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: "), stderr[-3000:]
    errors = [line for line in stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def refused(*args: str, timeout_s: float = 120) -> tuple[int, str]:
    done = subprocess.run(
        [OMNI_CPU, "run", *args], capture_output=True, text=True, timeout=timeout_s
    )
    return done.returncode, error_line(done.stderr)


# ---- mistakes found before any engine starts -------------------------------------------


def test_a_directory_as_out_is_refused_at_once(tiny_checkpoint: Path, tmp_path: Path) -> None:
    code, line = refused("--model", str(tiny_checkpoint), "--text", "Hi", "--out", str(tmp_path))
    assert code == 2 and "is a directory" in line
    assert list(tmp_path.iterdir()) == []


def test_a_device_as_out_is_refused_and_left_as_it_was(tiny_checkpoint: Path) -> None:
    before = os.stat("/dev/null")
    code, line = refused("--model", str(tiny_checkpoint), "--text", "Hi", "--out", "/dev/null")
    assert code == 2 and "device" in line and "--out-special" in line
    after = os.stat("/dev/null")
    assert (after.st_mode, after.st_rdev) == (before.st_mode, before.st_rdev)


def test_a_symlink_as_out_is_refused_and_kept(tiny_checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.wav"
    target.write_bytes(b"keep")
    link = tmp_path / "link.wav"
    link.symlink_to(target)
    code, line = refused("--model", str(tiny_checkpoint), "--text", "Hi", "--out", str(link))
    assert code == 2 and "symlink" in line
    assert link.is_symlink() and target.read_bytes() == b"keep"


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` at `folder` (root only), unmounted after."""
    folder.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)])
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_folder_is_refused_before_the_engines(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "ro", "1m", read_only=True) as folder:
        # No engine loaded: the suite's engine bar fails this (unmarked) test if one started.
        code, line = refused(
            "--model", str(tiny_checkpoint), "--text", "Hi", "--out", str(folder / "a.wav")
        )
        assert code == 2 and "Read-only file system" in line
        assert list(folder.iterdir()) == []


def test_a_full_disk_is_refused_before_the_engines(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "full", "64k") as folder:
        with contextlib.suppress(OSError), (folder / "filler").open("wb") as filler:
            filler.write(b"\0" * (1 << 20))  # fills it: ENOSPC past 64 KiB
        code, line = refused(
            "--model", str(tiny_checkpoint), "--text", "Hi", "--out", str(folder / "a.wav")
        )
        assert code == 2 and "No space left on device" in line
        assert [p.name for p in folder.iterdir()] == ["filler"]


@needs_runtime
def test_text_over_the_talkers_context_is_refused_before_the_engines(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # Not marked e2e: the suite's engine bar (tests/conftest.py) fails this test if a stage
    # engine started, which is what "before the engines" means (a wall-clock bound was not:
    # a busy box took over its minute to refuse).
    code, line = refused(
        "--model", str(tiny_checkpoint), "--text", "😀" * 1100, "--out", str(tmp_path / "a.wav")
    )
    assert code == 2 and "max_model_len" in line
    assert list(tmp_path.iterdir()) == []


# ---- kills and interrupts while synthesizing ---------------------------------------------


class LiveRun:
    """`omni-cpu run --stream` in the background, its stderr read as it comes."""

    def __init__(self, checkpoint: Path, out: Path, env: dict[str, str] | None = None) -> None:
        self.token = uuid.uuid4().hex
        self.shm_before = set(os.listdir(SHM))
        env = {**os.environ, **(env or {}), "OMNI_CPU_E2E_TOKEN": self.token}
        command = [
            OMNI_CPU, "run", "--model", str(checkpoint), "--text", "Hello from the CPU.",
            "--max-frames", LONG_FRAMES, "--stream", "--out", str(out),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self.tree: list[int] = []
        self.synthesizing = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "synthesizing" in line:
                self.synthesizing.set()

    def wait_synthesizing(self, timeout_s: float = 600) -> None:
        assert self.synthesizing.wait(timeout_s), "".join(self.lines)[-3000:]
        time.sleep(1)  # first chunks are out
        assert self.process.poll() is None, "the run ended before the test could strike it"
        # A process that has ended shows no token: remember the whole tree while it runs.
        self.tree = [self.process.pid, *proctree.descendants(self.process.pid)]

    def stage_process(self, stage_id: int, role: str) -> int:
        """The engine core of `stage_id`, or (role "Worker") its worker."""
        for pid in proctree.descendants(self.process.pid):
            command = proctree.command_line(pid)
            if "EngineCore" in command and f"_stage{stage_id}_" in command:
                if role == "EngineCore":
                    return pid
                # Workers do not carry their stage in their title: their engine core does.
                for child in psutil.Process(pid).children():
                    if "Worker" in " ".join(child.cmdline()):
                        return child.pid
        raise AssertionError(f"no {role} of stage {stage_id}")

    def finish(self, timeout_s: float = 120) -> tuple[int, str]:
        code = self.process.wait(timeout=timeout_s)
        self._reader.join(10)
        return code, "".join(self.lines)

    def leftovers(self) -> tuple[list[int], list[str]]:
        """Processes and /dev/shm entries of this run still there after 10 s at most."""
        eventually(lambda: not live_pids_with_token(self.token), 10)
        left = sorted(
            set(proctree.wait_gone(self.tree, 10)) | set(live_pids_with_token(self.token))
        )
        eventually(lambda: not self.new_shm(), 10)
        return sorted(left), self.new_shm()

    def new_shm(self) -> list[str]:
        """Entries made since the start that are not someone else's (new_shm_entries)."""
        return new_shm_entries(self.shm_before, self.tree)


@pytest.mark.e2e
@needs_runtime
def test_a_killed_driver_leaves_no_process_shared_memory_or_file(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    run = LiveRun(tiny_checkpoint, tmp_path / "a.wav")
    run.wait_synthesizing()
    run.process.kill()  # what the OOM killer does
    code, _ = run.finish()
    assert code == -signal.SIGKILL
    assert run.leftovers() == ([], [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
@needs_runtime
@pytest.mark.parametrize(
    ("stage_id", "role", "named"),
    # One process per stage: the worker runs inside its engine core (vLLM's "uni"
    # executor, omni_cpu.platform.DRIVER_ENV), so each stage is killed there.
    [
        (0, "EngineCore", "stage 0 (talker) engine core"),
        (1, "EngineCore", "stage 1 (code2wav) engine core"),
    ],
)
def test_a_killed_stage_process_fails_the_run_naming_it(
    tiny_checkpoint: Path, tmp_path: Path, stage_id: int, role: str, named: str
) -> None:
    run = LiveRun(tiny_checkpoint, tmp_path / "a.wav")
    run.wait_synthesizing()
    victim = run.stage_process(stage_id, role)
    os.kill(victim, signal.SIGKILL)
    code, stderr = run.finish()
    assert code == 4, stderr[-3000:]
    line = error_line(stderr, engines_ran=True)
    assert named in line and f"pid {victim}" in line
    assert "kv_cache_memory_bytes" not in line  # memory was not the cause
    assert run.leftovers() == ([], [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
@needs_runtime
def test_ctrl_c_mid_stream_exits_130_and_leaves_nothing(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    run = LiveRun(tiny_checkpoint, tmp_path / "a.wav")
    run.wait_synthesizing()
    run.process.send_signal(signal.SIGINT)
    code, stderr = run.finish()
    assert code == 130, stderr[-3000:]
    # omni-cpu's own line; the stages' log lines may land around it.
    assert "interrupted" in stderr.strip().splitlines(), stderr[-3000:]
    assert run.leftovers() == ([], [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
@needs_runtime
def test_a_hung_stage_fails_the_run_naming_it(tiny_checkpoint: Path, tmp_path: Path) -> None:
    run = LiveRun(tiny_checkpoint, tmp_path / "a.wav", env={"OMNI_CPU_STAGE_STALL_S": "4"})
    run.wait_synthesizing()
    victim = run.stage_process(0, "EngineCore")
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        code, stderr = run.finish(timeout_s=60)
    finally:
        with contextlib.suppress(OSError):
            os.kill(victim, signal.SIGCONT)
    assert code == 4, stderr[-3000:]
    assert time.monotonic() - stopped_at < 30
    line = error_line(stderr, engines_ran=True)
    assert f"stage 0 (talker) engine core pid {victim}" in line and "no progress" in line
    assert run.leftovers() == ([], [])
    assert list(tmp_path.iterdir()) == []
