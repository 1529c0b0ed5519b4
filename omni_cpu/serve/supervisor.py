"""Run a serve plan: start vLLM-Omni's API server, watch it, drain and stop it on SIGTERM.

vLLM-Omni 0.30.0 stops its stage engines as soon as its API server gets SIGTERM,
so requests in flight never finish (their connections hang until the client gives
up). The supervisor stands in front of that: on SIGTERM or Ctrl-C it raises the
drain flag (the admission middleware then turns new speech requests and /health
away with 503), waits up to `drain_timeout_s` for the in-flight gauge on /metrics
to reach 0, then stops the server and every process under it. A second signal
skips the wait.

A stage process that dies while serving is not restarted: vLLM-Omni 0.30.0 then
answers every request 500 for as long as it runs, and restarting one stage in
place is not something it supports. The supervisor notices within a second,
writes which stage died to the down file (the middleware's /health and speech
requests then answer 503 naming it), stops everything and exits 4, so that
systemd, Kubernetes or any supervisor restarts the whole server clean. A stage that
holds work (speech requests in flight) and makes no progress for `stall_s`
(omni_cpu.process.watch) is hung, and is treated the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TextIO

import psutil

from omni_cpu import pins
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.errors import InputError, PortInUseError, StageError
from omni_cpu.launch import logs
from omni_cpu.process import proctree
from omni_cpu.process.guard import StageGuard
from omni_cpu.process.stage_processes import stage_binds
from omni_cpu.process.watch import StageWatch
from omni_cpu.serve import voices
from omni_cpu.serve.command import TMP_SUBDIR, WORKDIR_PREFIX, ServePlan
from omni_cpu.serve.knobs import IN_FLIGHT_METRIC, ON_CLIENT_METRIC

POLL_S = 0.25
# Stopped while starting: nothing to drain, and engines that are loading finish loading
# before they heed SIGTERM (10-15 s), so they get this long, then SIGKILL.
STARTUP_STOP_S = 1.0
DOWN_REPORT_S = 2.0  # /health names the dead stage this long before the server stops


def local_url(host: str, port: int, path: str) -> str:
    """A loopback URL for the server, whatever address it listens on."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The status code of GET url, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (OSError, ValueError):
        return None


def admission_gauges(host: str, port: int, timeout_s: float = 2.0) -> dict[str, float] | None:
    """The middleware's gauges on /metrics (name -> value), or None when it is silent."""
    try:
        with urllib.request.urlopen(local_url(host, port, "/metrics"), timeout=timeout_s) as reply:
            text = reply.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (IN_FLIGHT_METRIC, ON_CLIENT_METRIC):
            with contextlib.suppress(ValueError):
                values[name] = float(value.split()[0])
    return values if IN_FLIGHT_METRIC in values else None


def in_flight(host: str, port: int, timeout_s: float = 2.0) -> int | None:
    """Requests in flight per the middleware's gauge, or None when /metrics is silent."""
    values = admission_gauges(host, port, timeout_s)
    return None if values is None else int(values[IN_FLIGHT_METRIC])


def engine_busy(host: str, port: int) -> bool:
    """True when requests in flight wait on the stages (not only on their clients)."""
    values = admission_gauges(host, port)
    if values is None:
        return False
    return values[IN_FLIGHT_METRIC] - values.get(ON_CLIENT_METRIC, 0.0) > 0


def check_port_free(host: str, port: int) -> None:
    """PortInUseError when something already listens on host:port (checked before any engine).

    Bound the way uvicorn binds (SO_REUSEADDR), so only a live listener counts,
    not a port an earlier server left in TIME_WAIT.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                return  # not ours to judge (an address this host lacks): the server says
            raise PortInUseError(
                f"port {port} on {host or '0.0.0.0'} is in use (another server?)",
                "stop it, or serve on another --port",
            ) from None


def listens_on(root: int, port: int) -> bool:
    """True when `root` or a process under it listens on TCP `port`."""
    for pid in [root, *proctree.descendants(root)]:
        try:
            connections = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections):
            return True
    return False


def sweep_workdirs(folder: Path) -> list[Path]:
    """Remove serve folders beside `folder` whose server process is gone (killed, say)."""
    removed = []
    for entry in folder.parent.glob(f"{WORKDIR_PREFIX}*-*"):
        pid = entry.name.rsplit("-", 1)[-1]
        if entry == folder or not pid.isdigit() or proctree.is_running(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if entry.stat().st_uid == os.getuid():
                shutil.rmtree(entry)
                removed.append(entry)
    return removed


def prepare_workdir(plan: ServePlan) -> None:
    """Write the deploy config; clear a drain flag left by an earlier run on this port."""
    folder = Path(plan.workdir)
    sweep_workdirs(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise InputError(
            f"{folder} belongs to another user", "remove it or serve on another --port"
        )
    (folder / TMP_SUBDIR).mkdir(mode=0o700, exist_ok=True)  # the server's TMPDIR
    Path(plan.deploy_config_path).write_text(plan.deploy_config_yaml())
    Path(plan.limits.drain_file).unlink(missing_ok=True)
    if plan.limits.down_file:
        Path(plan.limits.down_file).unlink(missing_ok=True)


def server_exit_error(code: int, pid: int, oom_note: str) -> StageError:
    """The one line for an API server that exited by itself: killed by the kernel's OOM
    killer (a SIGKILL while it ran: `oom_note` says so) is said as such, not as a stage."""
    if code == -signal.SIGKILL and oom_note:
        return StageError(
            f"the kernel's OOM killer killed the vLLM-Omni API server (pid {pid})"
            + oom_note.removeprefix("; the kernel's OOM killer ran"),
            "give the server more memory (the pod's limit, the cgroup's memory.max) or plan "
            "a lighter format (`--weights int4`); `omni-cpu probe` says what fits",
        )
    return StageError(
        f"the vLLM-Omni API server exited with code {code}",
        "see its log above; `omni-cpu doctor` checks the runtime",
    )


def _child_setup(replica_cpus: tuple[int, ...]) -> Callable[[], None]:
    def setup() -> None:
        proctree.die_with_parent(signal.SIGTERM)
        if replica_cpus:
            # The server and the stages it spawns stay on this replica's CPUs. Not narrower:
            # stage workers inherit this mask, and Intel OpenMP binds only inside it.
            with contextlib.suppress(OSError):  # CPU ids from another machine's profile
                os.sched_setaffinity(0, replica_cpus)

    return setup


def pin_frontend(root: int, cpus: tuple[int, ...]) -> list[int]:
    """Move the API server, and engine cores that have a worker of their own, onto `cpus`.

    Done once the server is ready: the workers have bound their OpenMP threads by
    then, so narrowing their parents no longer reaches them. An engine core with no
    worker process runs the model itself (vLLM's "uni" executor, omni-cpu's default:
    omni_cpu.platform.DRIVER_ENV), so it stays on its stage's CPUs.
    """
    engine_cores = [
        pid for pid in proctree.descendants(root) if "EngineCore" in proctree.command_line(pid)
    ]
    with_worker = [
        pid
        for pid in engine_cores
        if any("Worker" in proctree.command_line(child) for child in proctree.descendants(pid))
    ]
    return [pid for pid in [root, *with_worker] if proctree.pin_threads(pid, cpus)]


class Supervisor:
    """Owns one API server process and everything it starts."""

    def __init__(self, plan: ServePlan, log: TextIO = sys.stderr) -> None:
        self.plan = plan
        self.log = log
        self.stop_requests = 0
        self.child: subprocess.Popen[bytes] | None = None
        self.ready = False

    def say(self, text: str) -> None:
        print(f"omni-cpu serve: {text}", file=self.log, flush=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requests += 1

    def run(self) -> int:
        """Serve until the server exits or a stop is requested; the exit code."""
        plan = self.plan
        check_port_free(plan.host, plan.port)
        if (other := pins.other_versions()) is not None:
            print(f"warning: {other}", file=self.log)
        prepare_workdir(plan)
        proctree.become_subreaper()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        guard = StageGuard().__enter__()  # the token reaches every process the server starts
        env = {**os.environ, **plan.env}
        logs.merge_log_env(env, plan.log_env)
        try:
            self.child = subprocess.Popen(
                list(plan.argv),
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches only us; we drain first
                preexec_fn=_child_setup(plan.replica_cpus),
            )
            self.say(
                f"replica {plan.replica}: vLLM-Omni API server pid {self.child.pid}, "
                f"{local_url(plan.host, plan.port, '')} (deploy config {plan.deploy_config_path})"
            )
            return self._watch()
        finally:
            if self.child is not None:
                left = proctree.stop_tree(
                    self.child.pid,
                    plan.stop_timeout_s if self.ready else STARTUP_STOP_S,
                    include_adopted=True,
                    spare=StageGuard.watchdog_pids,
                )
                if left:
                    self.say(f"processes still running after SIGKILL: {left}")
            guard.__exit__(None, None, None)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            shutil.rmtree(plan.workdir, ignore_errors=True)

    def _watch(self) -> int:
        assert self.child is not None
        ready = False
        last_probe = 0.0
        watch = StageWatch(
            self.child.pid,
            stage_binds(self.plan.deploy_config),
            self.plan.stall_s,
            self.plan.progress_dir,
        )
        last_census = 0.0
        last_look = 0.0
        while self.stop_requests == 0:
            code = self.child.poll()
            if code is not None:
                raise server_exit_error(code, self.child.pid, watch.oom_note())
            now = time.monotonic()
            if now - last_census >= 1.0:  # stage processes appear while the server starts
                last_census = now
                watch.sample()
            deaths = watch.deaths()
            if deaths is not None:
                self._stage_down(deaths + watch.oom_note())
            if ready and self.plan.stall_s and now - last_look >= 1.0:
                last_look = now
                busy = engine_busy(self.plan.host, self.plan.port)
                stalled = watch.stalled(busy=busy)
                if stalled is not None:
                    self._stage_down(stalled)
            if not ready and now - last_probe >= 2.0:
                last_probe = now
                # Only our server counts: a probe can reach another one that took the port.
                if http_status(
                    local_url(self.plan.host, self.plan.port, "/health")
                ) == 200 and listens_on(self.child.pid, self.plan.port):
                    ready = self.ready = True
                    if self.plan.frontend_cpus:
                        pinned = pin_frontend(self.child.pid, self.plan.frontend_cpus)
                        cpus = format_cpu_list(self.plan.frontend_cpus)
                        self.say(f"API server {pinned} pinned to CPUs {cpus}")
                    self._preload_voices()
                    self.say("ready")
            time.sleep(POLL_S)
        if ready:
            self._drain()
        else:
            self.say("stopped while starting; stopping the stage processes")
        return 0

    def _preload_voices(self) -> None:
        """serve --voices: upload the folder's voices through the server's own checks."""
        if not self.plan.voices_dir:
            return
        base = local_url(self.plan.host, self.plan.port, "")
        for name, refused in voices.preload(base, Path(self.plan.voices_dir)):
            self.say(f"voice {name}: " + ("loaded" if refused is None else f"refused: {refused}"))

    def _stage_down(self, what: str) -> None:
        """Say which stage died or hung, let /health report it briefly, then fail (exit 4)."""
        self.say(f"{what}; stopping (a stage is not restarted in place)")
        with contextlib.suppress(OSError):
            Path(self.plan.limits.down_file).write_text(what + "\n")
        time.sleep(DOWN_REPORT_S)
        raise StageError(
            f"serving stopped: {what}",
            "its log above says why; restart the server (a supervisor such as systemd "
            "or Kubernetes does this on the non-zero exit)",
        )

    def _drain(self) -> None:
        """Refuse new work, then wait (bounded) for admitted requests to finish."""
        assert self.child is not None
        plan = self.plan
        try:
            Path(plan.limits.drain_file).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            Path(plan.limits.drain_file).touch()
        except OSError as error:  # the stop goes on; only the 503s before it are lost
            self.say(f"cannot raise the drain flag ({error.strerror}); stopping without it")
        deadline = time.monotonic() + plan.drain_timeout_s
        self.say(f"draining (up to {plan.drain_timeout_s:g} s; signal again to stop now)")
        while self.stop_requests < 2 and self.child.poll() is None:
            count = in_flight(plan.host, plan.port)
            if not count:  # 0, or no server answering: nothing to wait for
                break
            if time.monotonic() >= deadline:
                self.say(f"drain timeout with {count} request(s) still in flight")
                break
            time.sleep(POLL_S)
        self.say("stopping the server and its stage processes")


def serve(plan: ServePlan, log: TextIO = sys.stderr) -> int:
    """Run `plan` in the foreground until stopped; the exit code."""
    return Supervisor(plan, log).run()
