"""Nothing the pipeline starts outlives the process that owns it, however that process ends.

vLLM-Omni starts an engine-core process per stage, each starts a worker, and
Python adds a resource tracker; killed with SIGKILL (as the OOM killer does),
the owner cannot stop them, and they live on, re-parented to init, holding GBs
of RAM and /dev/shm. So the owner (`run`, `bench`, `tune`, `serve`) puts a token
in the environment every process it starts inherits, and starts a watchdog: a
small process in its own session connected to the owner by a socket. When the
owner is gone the socket closes, and the watchdog kills every process carrying
the token, waits (briefly) for the resource tracker to unlink what it tracked,
removes the /dev/shm entries its ledger recorded (`omni_cpu.process.shm`) and
half-written outputs, and exits. On a normal exit the owner asks for the same
sweep while it still runs. A start also sweeps what runs whose watchdog died
too left behind.

Stage processes forked from the driver (omni_cpu.platform.fork) show the driver's
start environment in /proc, not the token it set later: a driver that re-executed
itself to fork its stages (omni_cpu.launch.relaunch) starts with a mark of its own
(`envs.DRIVER`, naming its pid), and its watchdog counts processes carrying that
mark as the owner's too (never the owner itself). Every child the owner forks
closes the owner's end of the watchdog's socket at once: held open by a child,
the socket would not close when the owner dies.

The watchdog runs as `python -m omni_cpu.process.guard TOKEN OWNER_PID [FOLDER...]`.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psutil

from omni_cpu import envs
from omni_cpu.process import procfs, shm

# setproctitle's own switch: vLLM titles every stage process (VLLM::StageEngineCoreProc_...),
# and setproctitle 1.3 writes the title over the environment block unless this is set, so
# the token (and every variable) would no longer be readable in the stages it must find.
# The title is then as long as the command line had room for: a stage's spawn line has
# more than enough, and so has the `omni-cpu` command line a forked stage inherits.
# A forked stage's environment block is the driver's start environment (omni_cpu.platform.fork),
# where the driver's mark sits: the same switch keeps it readable.
KEEP_ENVIRON_ENV = "SPT_NOENV"
POLL_S = 1.0
TRACKER_GRACE_S = 3.0  # the resource tracker unlinks what it tracked once its pipe closes
STOP = b"s"
STOPPED = b"k"


def new_driver_mark(pid: int, epoch: float) -> str:
    """The `envs.DRIVER` value a driver re-executing itself as `pid` at `epoch` starts with."""
    return f"{pid} {epoch:.3f} {uuid.uuid4().hex}"


def driver_mark(pid: int, environ: dict[str, str] | None = None) -> str:
    """The mark `pid` started with for itself ('' if none); `environ`: its start environment.

    The pid in the mark must be `pid`'s own: a process that merely inherited a
    driver's mark (anything the driver started) is not that driver.
    """
    value = (procfs.environ(pid) if environ is None else environ).get(envs.DRIVER.name, "")
    parts = value.split()
    return value if len(parts) == 3 and parts[0] == str(pid) else ""


def token_processes(
    token: str,
    among: list[psutil.Process] | None = None,
    mark: str = "",
    spare: int | None = None,
) -> list[psutil.Process]:
    """Live processes whose environment carries `token`, or the driver `mark` when one is
    given (ours to stop), of `among` or all; never this process or `spare` (the owner)."""
    found = []
    me = os.getpid()
    for process in psutil.process_iter() if among is None else among:
        if process.pid in (me, spare):
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            environ = procfs.environ(process.pid)
            if environ.get(envs.OWNER.name) == token or (
                mark and environ.get(envs.DRIVER.name) == mark
            ):
                found.append(process)
        except psutil.Error:
            continue
    return found


def _is_tracker(process: psutil.Process) -> bool:
    try:
        return "multiprocessing.resource_tracker" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def kill_all(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=5)


def reap_orphans() -> int:
    """Kill processes of finished runs (their owner and watchdog gone); how many."""
    marks = {ledger.token: ledger.mark for ledger in shm.finished_ledgers()}
    orphans = [p for token, mark in marks.items() for p in token_processes(token, mark=mark)]
    kill_all(orphans)
    return len(orphans)


class Watchdog:
    """The watchdog's side: record, and on the owner's word or death, stop and sweep."""

    def __init__(self, token: str, owner_pid: int, folders: list[Path]) -> None:
        self.token = token
        self.owner_pid = owner_pid
        self.folders = folders
        # Stages forked from a driver that re-executed itself carry its mark, not the token.
        self.mark = driver_mark(owner_pid)
        self.ledger = shm.Ledger(token, owner_pid, os.getpid(), mark=self.mark)
        try:
            self.baseline = set(os.listdir(shm.SHM_DIR))
        except OSError:
            self.baseline = set()
        self.ledger.save()

    def _candidates(self) -> list[psutil.Process]:
        """The owner's descendants and those of every process seen before (re-parented too)."""
        roots = [self.owner_pid, *self.ledger.pids]
        found: dict[int, psutil.Process] = {}
        for pid in roots:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                found[pid] = process
                found.update((child.pid, child) for child in process.children(recursive=True))
        return list(found.values())

    def record(self, everywhere: bool = False) -> list[psutil.Process]:
        processes = token_processes(
            self.token,
            None if everywhere else self._candidates(),
            mark=self.mark,
            spare=self.owner_pid,
        )
        changed = self.ledger.record([self.owner_pid, *(p.pid for p in processes)])
        before = len(self.ledger.names)
        self.ledger.record_new(self.baseline)
        if changed or len(self.ledger.names) != before:
            self.ledger.save()
        return processes

    def stop(self, owner_alive: bool) -> None:
        """Kill the token's processes and remove what they left that nobody holds."""
        processes = self.record(everywhere=True)
        kill_all([p for p in processes if not _is_tracker(p)])
        trackers = [p for p in processes if _is_tracker(p)]
        if not owner_alive and trackers:
            _, alive = psutil.wait_procs(trackers, timeout=TRACKER_GRACE_S)
            kill_all(alive)
        self.ledger.save()
        shm.remove(shm.leftovers(self.ledger, procfs.shm_names_in_use()))

    def finish(self) -> None:
        self.stop(owner_alive=False)
        from omni_cpu.speech.wav import sweep_partials

        for folder in self.folders:
            sweep_partials(folder)
        shm.sweep(self.ledger)

    def serve(self, channel: socket.socket) -> None:
        stopped = False
        while True:
            ready, _, _ = select.select([channel], [], [], None if stopped else POLL_S)
            if not ready:
                try:
                    self.record()
                except Exception:  # a process that changed under us; the next poll sees it
                    _log_error(self.token)
                continue
            try:
                message = channel.recv(16)
            except OSError:
                message = b""
            if not message:  # the owner is gone (or let go): sweep and leave
                self.finish()
                return
            if STOP in message:
                self.stop(owner_alive=True)
                stopped = True
                with contextlib.suppress(OSError):
                    channel.sendall(STOPPED)


class StageGuard:
    """The owner's side: token in the environment, watchdog started, sweep on request.

    `with StageGuard(folders):` around everything that starts stage processes. The
    socket stays open until this process ends (the watchdog's last sweep waits for
    that), so a guard that was left does not stop watching.
    """

    _held: list[socket.socket] = []  # noqa: RUF012 - kept open for the process's life
    watchdog_pids: set[int] = set()  # noqa: RUF012 - every watchdog this process started

    def __init__(self, output_folders: list[Path] | tuple[Path, ...] = ()) -> None:
        self.output_folders = [Path(folder) for folder in output_folders]
        self.token = uuid.uuid4().hex
        self._channel: socket.socket | None = None
        self._previous: dict[str, str | None] = {}
        self.watchdog_pid: int | None = None

    def __enter__(self) -> StageGuard:
        reap_orphans()
        shm.sweep_finished()
        from omni_cpu.speech.wav import sweep_partials

        for folder in self.output_folders:
            sweep_partials(folder)
        ours, theirs = socket.socketpair()
        # The watchdog carries neither the token nor the driver's mark: it is not ours to stop.
        ours_only = (envs.OWNER.name, envs.DRIVER.name)
        env = {key: value for key, value in os.environ.items() if key not in ours_only}
        command = [sys.executable, "-m", "omni_cpu.process.guard", self.token, str(os.getpid())]
        launcher = subprocess.Popen(
            [*command, *map(str, self.output_folders)],
            stdin=theirs,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C must not reach it
        )
        theirs.close()
        launcher.wait()  # it forks the watchdog and exits: not our child, not in our tree
        ours.settimeout(30)
        try:
            self.watchdog_pid = int(ours.recv(16).decode().strip() or 0) or None
        except (OSError, ValueError):
            self.watchdog_pid = None
        ours.settimeout(None)
        if self.watchdog_pid is not None:
            StageGuard.watchdog_pids.add(self.watchdog_pid)
        self._channel = ours
        StageGuard._held.append(ours)
        self._previous = {key: os.environ.get(key) for key in (envs.OWNER.name, KEEP_ENVIRON_ENV)}
        os.environ[envs.OWNER.name] = self.token
        os.environ[KEEP_ENVIRON_ENV] = "1"
        return self

    def stop_stages(self, timeout_s: float = 10.0) -> bool:
        """Have the watchdog kill what is left of this guard's processes and sweep; True if done."""
        if self._channel is None:
            return False
        try:
            self._channel.sendall(STOP)
            self._channel.settimeout(timeout_s)
            return self._channel.recv(1) == STOPPED
        except OSError:
            return False

    def __exit__(self, *exc_info: object) -> None:
        self.stop_stages()
        for key, value in self._previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _close_channels_in_child() -> None:
    """In a forked child: drop the owner's end of every watchdog socket (see the module doc)."""
    for channel in StageGuard._held:
        with contextlib.suppress(OSError):
            channel.close()
    StageGuard._held.clear()


os.register_at_fork(after_in_child=_close_channels_in_child)


def _log_error(token: str) -> None:
    """The watchdog has no terminal: what went wrong goes to a file in the temp folder."""
    import tempfile
    import traceback

    with (
        contextlib.suppress(OSError),
        open(Path(tempfile.gettempdir()) / f"omni-cpu-watchdog-{token}.log", "a") as log,
    ):
        traceback.print_exc(file=log)


def main(argv: list[str]) -> int:
    # Fork once more and let the first process exit: vLLM's error paths kill the
    # driver's whole process tree, and the watchdog must survive exactly that.
    if os.fork() != 0:
        os._exit(0)
    token, owner = argv[0], int(argv[1])
    with contextlib.suppress(OSError):
        os.write(sys.stdin.fileno(), f"{os.getpid()}\n".encode())
    watchdog = Watchdog(token, owner, [Path(folder) for folder in argv[2:]])
    channel = socket.socket(fileno=os.dup(sys.stdin.fileno()))
    try:
        watchdog.serve(channel)
    except Exception:
        _log_error(token)
        watchdog.finish()  # whatever failed, the owner's processes still go
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
