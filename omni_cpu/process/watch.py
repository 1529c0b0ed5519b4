"""The stage watch: which stage processes died, and whether a pipeline holding work is hung.

`StageWatch` is the one watcher `run` and `serve` both use: it remembers every
stage process it has seen, since an error from vLLM-Omni rarely says which process
went and a process that is gone can no longer be asked which stage it was.

Hung (`ProgressWatch`): a stage process that stops (SIGSTOP, a debugger, a
deadlock, a swap storm) does not die, so nothing fails: requests wait forever and
`/health` keeps saying 200.
Progress is work done: the engine steps each stage counts (omni_cpu.process.progress;
run and serve have their stages count them), else CPU time (an idle stage's poll loop burns
some, so CPU time sees only a stopped stage). While work is held (a `run` is
generating, or a server has requests in flight that are not waiting on their
client), when no stage has made progress for `stall_s` (OMNI_CPU_STAGE_STALL_S), the
pipeline is stalled; the stage named is the one the kernel shows stopped, else
every stage that made no progress. `run` and `serve` then fail the way they do for a dead
stage (exit 4), so a supervisor restarts them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from omni_cpu import envs
from omni_cpu.process import procfs, proctree
from omni_cpu.process.progress import read_steps
from omni_cpu.process.stage_processes import STAGE_ROLES, StageBinds, StageProcess, identify

# Below this much CPU gained between two looks a process made no progress (clock ticks
# are 10 ms; an idle engine core's poll loop takes less than this in a second).
PROGRESS_CPU_S = 0.02


def stall_seconds() -> float:
    """How long work may go without progress before the pipeline counts as hung (0 = never)."""
    return float(envs.OMNI_CPU_STAGE_STALL_S)


def is_stopped(pid: int) -> bool:
    """True when the kernel shows `pid` stopped (SIGSTOP, a tracer)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


class ProgressWatch:
    """Fed a look at the stage processes now and then; says when work stopped moving."""

    def __init__(
        self,
        stall_s: float,
        cpu_seconds: Callable[[int], float] = proctree.cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
        steps: Callable[[], dict[int, int]] | None = None,
    ) -> None:
        self.stall_s = stall_s
        self._cpu_seconds = cpu_seconds
        self._clock = clock
        self._steps = steps  # work steps by pid; None: CPU time is the measure
        self._cpu: dict[int, float] = {}  # pid -> work at the last look (steps or CPU-s)
        self._moved: dict[int, float] = {}  # pid -> when it last did work
        self._since: float | None = None  # when work was last seen moving (or began)
        self._stopped_since: dict[int, float] = {}

    def look(self, stages: Iterable[StageProcess], busy: bool) -> str | None:
        """Record each stage's work (steps, else CPU time); while `busy`, the stall in one line
        once it lasts `stall_s`."""
        now = self._clock()
        moved = False
        stages = [stage for stage in stages if stage.role in STAGE_ROLES]
        every = stages
        counts = (self._steps() or None) if self._steps is not None else None
        if counts is not None:  # only the processes that run a model count steps
            stages = [stage for stage in stages if stage.pid in counts]
        for stage in stages:
            if counts is not None:
                work, least = float(counts[stage.pid]), 1.0
            else:
                work, least = self._cpu_seconds(stage.pid), PROGRESS_CPU_S
            before = self._cpu.get(stage.pid)
            self._cpu[stage.pid] = work
            if before is None or work - before >= least:
                self._moved[stage.pid] = now
                moved = True
        # A stopped stage holds up the others while they idle-poll: it counts on its own.
        stopped = [stage for stage in every if is_stopped(stage.pid)]
        for stage in stopped:
            self._stopped_since.setdefault(stage.pid, now)
        for pid in set(self._stopped_since) - {stage.pid for stage in stopped}:
            del self._stopped_since[pid]
        if not busy or moved or self._since is None:
            self._since = now
        if not busy or self.stall_s <= 0:
            return None
        held = [s for s in stopped if now - self._stopped_since[s.pid] >= self.stall_s]
        if held:
            waited = now - min(self._stopped_since[s.pid] for s in held)
            what = ", ".join(stage.describe() for stage in held)
            return f"{what} made no progress for {waited:.0f} s with work in flight (stopped)"
        if now - self._since < self.stall_s:
            return None
        hung = stopped or [s for s in stages if now - self._moved.get(s.pid, now) >= self.stall_s]
        what = ", ".join(stage.describe() for stage in hung) or "the stages"
        why = " (stopped)" if stopped else ""
        return f"{what} made no progress for {now - self._since:.0f} s with work in flight{why}"


class StageWatch:
    """Every stage process seen under `root`: the ones that died, and a stall while busy.

    `sample` often (a spawned process shows its stage only once it runs); `dead`
    and `deaths` name what is gone, `stalled` feeds the `ProgressWatch`. Sampled
    from one thread and asked from another (`run`): reads copy `seen` first.
    """

    def __init__(
        self, root: int, binds: StageBinds, stall_s: float, progress_dir: str = ""
    ) -> None:
        self.root = root
        self.binds = binds
        self.seen: dict[int, StageProcess] = {}
        steps = (lambda: read_steps(Path(progress_dir))) if progress_dir else None
        self.progress = ProgressWatch(stall_s, steps=steps)
        self.oom_kills_before = procfs.oom_kills()

    def sample(self) -> None:
        """Remember the processes under `root` now, as the stage each one is."""
        for pid in proctree.descendants(self.root):
            known = self.seen.get(pid)
            # A spawned process takes its title (engine core, worker) only once it runs.
            if known is None or known.role == "process" or known.stage_id is None:
                self.seen[pid] = identify(pid, self.binds)

    def dead(self) -> list[StageProcess]:
        """Stage processes (engine cores, workers) seen before and gone now."""
        seen = list(self.seen.values())
        return [p for p in seen if p.role in STAGE_ROLES and not proctree.is_running(p.pid)]

    def deaths(self) -> str | None:
        """The dead stage processes in one line ("stage 0 (talker) engine core pid 7 died")."""
        dead = self.dead()
        return ", ".join(process.describe() for process in dead) + " died" if dead else None

    def stalled(self, busy: bool) -> str | None:
        """Look at the live stage processes' progress; the stall in one line once it lasts."""
        live = [p for p in list(self.seen.values()) if proctree.is_running(p.pid)]
        return self.progress.look(live, busy=busy)

    def oom_killed(self) -> bool:
        """True when the kernel's OOM killer ran since the watch began (any process)."""
        now = procfs.oom_kills()
        return None not in (now, self.oom_kills_before) and now > self.oom_kills_before

    def oom_note(self) -> str:
        """ "; the kernel's OOM killer ran (memory limit 3 GiB)" when it ran since the watch
        began, the limit being this process's cgroup's (if any); "" when it did not."""
        if not self.oom_killed():
            return ""
        from omni_cpu.hardware.limits import read_limits
        from omni_cpu.hardware.sysroot import SysRoot

        limit = read_limits(SysRoot()).memory_max_bytes
        within = f" (memory limit {limit / 2**30:.3g} GiB)" if limit else " (no memory limit set)"
        return "; the kernel's OOM killer ran" + within
