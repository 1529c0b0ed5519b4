"""A profile's shape bound onto the CPUs and memory nodes this process may use. Pure.

A profile states its shape: per replica a home node, the cores each stage binds
(one OpenMP thread per CPU listed; `smt_siblings` says whether the list holds whole
cores) and the front end's cores. The CPU ids it lists are what it was planned
with. Where every one of them is usable here (the machine it was planned on, or one
like it) they are kept as written; elsewhere (a pod whose CPU ids the kubelet picked,
a container's cpuset) each replica takes the same number of cores on one home here.
Everything else the profile says (weights, dtype, chunks, KV bytes, max seqs,
sampling, admission, calibration) stays exactly as written. A shape that does not
fit is one line naming what is missing and what would fit.

The libraries `omni_cpu.preload` names are found among the facts' preload libraries
(the runtime that runs, when the facts are live) and become the stages' LD_PRELOAD.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.facts import INTEL_OPENMP, TCMALLOC, Facts
from omni_cpu.plan.topology import NodeCores, PhysicalCore, nodes_with_cores
from omni_cpu.profile.model import Profile, Replica, StagePlan

# The files each name of `omni_cpu.preload` (omni_cpu.profile.model.PRELOAD_NAMES) is.
PRELOAD_FILES = {"intel-openmp": INTEL_OPENMP, "tcmalloc": TCMALLOC}


def wanted_preload(architecture: str) -> tuple[str, ...]:
    """What a stage preloads (omni_cpu.preload), whatever the planning host has: the image
    ships both, and start-up uses what the runtime it runs in has (`preload_paths`).
    Intel OpenMP is x86's only; tcmalloc is everywhere's."""
    return ("intel-openmp", "tcmalloc") if architecture == "x86_64" else ("tcmalloc",)


def preload_names(paths: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The names of the libraries at `paths` (the facts' preload libraries), in their order.

    Why preload them (and how little is known of the gain): RESULTS.md, "Intel OpenMP and
    tcmalloc preloaded". Intel OpenMP goes only with tcmalloc, never beside libgomp: with both
    preloaded vLLM trips an assert, and vLLM preloads torch's libgomp itself when none is set.
    """
    names = []
    for path in paths:
        base = os.path.basename(path)
        names += [name for name, files in PRELOAD_FILES.items() if base in files]
    return tuple(dict.fromkeys(names))


def preload_paths(names: tuple[str, ...], found: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Each name in `names` that `found` (library paths) holds, with its path."""
    paths = {}
    for name in names:
        path = next((p for p in found if os.path.basename(p) in PRELOAD_FILES.get(name, ())), None)
        if path is not None:
            paths[name] = path
    return paths


@dataclass(frozen=True)
class Move:
    """One stage's (or front end's) planned CPUs and the ones it binds here."""

    replica: int
    who: str  # "talker", "code2wav", "front end"
    planned: str
    here: str
    smt_siblings: bool = False  # `here` lists whole cores (else one CPU per core)

    def line(self) -> str:
        count = len(self.here_cpus())
        unit = "CPU" if self.smt_siblings else "core"
        cores = f"{count} {unit}{'s' if count != 1 else ''}"
        same = ", as planned" if self.planned == self.here else ""
        return (
            f"replica {self.replica} {self.who}: planned {self.planned or '-'} → "
            f"here {self.here or '-'} ({cores}{same})"
        )

    def here_cpus(self) -> tuple[int, ...]:
        return parse_cpu_list(self.here)


@dataclass(frozen=True)
class Binding:
    """The profile bound here, what moved, and why not where its shape does not fit."""

    profile: Profile  # the bound profile: every value as written but CPUs and memory nodes
    moves: tuple[Move, ...]
    relocated: bool  # False: every planned CPU is usable here and kept
    misfit: str | None = None  # the one line where the shape does not fit (then bound anyway)

    def lines(self) -> list[str]:
        return [move.line() for move in self.moves]


def bind_profile(profile: Profile, facts: Facts) -> Binding:
    """Bind `profile`'s shape onto the CPUs and memory nodes `facts` say this process may use.

    Never raises: where the shape does not fit, `misfit` says why in one line and
    the profile is bound anyway, stages sharing the cores there are (`--force`).
    """
    found = preload_paths(profile.preload, facts.preload_libraries)
    profile = dataclasses.replace(
        profile, preload_paths=tuple(found[name] for name in profile.preload if name in found)
    )
    homes = nodes_with_cores(facts)
    if _fits_as_planned(profile, facts):
        placed = _placed_here(profile, facts, homes)
        return Binding(placed, _moves(profile, placed), relocated=False)
    free = {home.node: list(home.cores) for home in homes}
    replicas = []
    for replica in profile.replicas:
        home = _choose_home(replica, homes, free)
        if home is None:
            misfit = _misfit(profile, facts, replica, homes, free)
            forced = _forced(profile, homes)
            return Binding(forced, _moves(profile, forced), relocated=True, misfit=misfit)
        replicas.append(_bind_replica(replica, home, free[home.node]))
    bound = dataclasses.replace(profile, replicas=tuple(replicas))
    return Binding(bound, _moves(profile, bound), relocated=True)


def _fits_as_planned(profile: Profile, facts: Facts) -> bool:
    """Every planned CPU is usable here, each stage's memory too, and the stages sit on
    nodes as they did where planned (a machine that numbers CPUs across nodes puts CPUs
    0 and 1 on two nodes: the shape moves onto one node's cores instead)."""
    usable = set(facts.usable_cpus())
    memory = set(facts.usable_memory_nodes())
    for replica in profile.replicas:
        if not replica.cpu_ids() <= usable:
            return False
        for stage in replica.stages:
            if facts.numa_stated and _follows_its_cpus(stage):
                continue  # its memory is derived here from its CPUs (_placed_here)
            if facts.numa_stated and not set(stage.memory_node_ids()) <= memory:
                return False
    return not facts.numa_stated or _same_node_shape(profile, facts.node_of_cpu())


def _same_node_shape(profile: Profile, node_of_here: dict[int, int]) -> bool:
    """Whether each stage's CPUs span no more nodes here than where planned, and stages
    that shared a node where planned share one here."""
    planned_node_of = {
        cpu: node["id"]
        for node in profile.machine.numa_nodes
        for cpu in parse_cpu_list(node["cpus"])
    }
    for replica in profile.replicas:
        planned, here = [], []
        for stage in replica.stages:
            cpus = stage.cpu_ids()
            planned.append(frozenset(planned_node_of[c] for c in cpus if c in planned_node_of))
            here.append(frozenset(node_of_here[c] for c in cpus if c in node_of_here))
        for i, (was, now) in enumerate(zip(planned, here, strict=True)):
            if len(now) > max(1, len(was)):
                return False
            for j in range(i):
                if was and was == planned[j] and now != here[j]:
                    return False
    return True


def _follows_its_cpus(stage: StagePlan) -> bool:
    """A stage whose memory is its CPUs' node (schema 5 writes no memory_nodes for it)."""
    return stage.memory_node_ids() == (stage.numa_node,)


def _placed_here(profile: Profile, facts: Facts, homes: list[NodeCores]) -> Profile:
    """The profile as planned, each stage's node (and the memory and replica home that
    follow it) taken from its first CPU's node here: moving a stage is one edit of its
    `cpus`. A stage whose memory nodes say something else keeps them."""
    node_of = facts.node_of_cpu()
    home_of = {cpu: home for home in homes for core in home.cores for cpu in core.siblings}

    def placed(stage: StagePlan) -> StagePlan:
        first = min(stage.cpu_ids())
        if first not in node_of or not _follows_its_cpus(stage):
            return stage
        home = home_of.get(first)
        memory = home.memory_node_ids() if home is not None else (node_of[first],)
        nodes = ",".join(str(node) for node in memory)
        return dataclasses.replace(stage, numa_node=node_of[first], memory_nodes=nodes)

    replicas = []
    for replica in profile.replicas:
        moved = dataclasses.replace(replica, stages=tuple(placed(s) for s in replica.stages))
        if replica.numa_node == replica.talker.numa_node:  # its home follows its talker
            home = home_of.get(min(moved.talker.cpu_ids()))
            numa_node = home.node if home is not None else moved.talker.numa_node
            moved = dataclasses.replace(moved, numa_node=numa_node)
        replicas.append(moved)
    return dataclasses.replace(profile, replicas=tuple(replicas))


def _core_demands(replica: Replica) -> list[tuple[str, str, int, bool]]:
    """(who, cpus as planned, CPUs to bind, whole cores) per distinct CPU set, front end last.

    Stages planned on the very same CPUs share them here too (--stages 1).
    """
    demands = []
    for cpus in _stage_sets(replica):
        stage = _first_on(replica, cpus)
        demands.append((stage.name, cpus, len(stage.cpu_ids()), stage.smt_siblings))
    if replica.frontend_cpus:
        count = len(replica.frontend_cpu_ids())
        demands.append(("front end", replica.frontend_cpus, count, False))
    return demands


def _cores_needed(count: int, whole: bool, cores: list[PhysicalCore]) -> int:
    """How many of `cores` (in order) give `count` CPUs: one each, or all siblings each."""
    if not whole:
        return count
    got = 0
    for taken, core in enumerate(cores, start=1):
        got += len(core.siblings)
        if got >= count:
            return taken
    return len(cores) + 1


def replica_cpu_count(replica: Replica) -> int:
    """The CPUs one replica's shape binds: its stages' (shared ones once) and front end's."""
    return sum(count for _, _, count, _ in _core_demands(replica))


def _choose_home(
    replica: Replica, homes: list[NodeCores], free: dict[int, list[PhysicalCore]]
) -> NodeCores | None:
    """The home with room for the whole replica: its planned node first, then the roomiest."""
    fitting = [
        home
        for home in homes
        if sum(
            _cores_needed(n, whole, free[home.node]) for _, _, n, whole in _core_demands(replica)
        )
        <= len(free[home.node])
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda h: (h.node != replica.numa_node, -len(free[h.node]), h.node))


def _take(cores: list[PhysicalCore], count: int, whole: bool) -> str:
    """Take the first cores of `cores` giving `count` CPUs; the CPU list they bind."""
    cpus: list[int] = []
    while len(cpus) < count and cores:
        core = cores.pop(0)
        cpus += list(core.siblings) if whole else [core.cpu]
    return format_cpu_list(cpus[:count] if not whole else cpus)


def _bind_replica(replica: Replica, home: NodeCores, free: list[PhysicalCore]) -> Replica:
    bound = {
        cpus: _take(free, count, whole)
        for who, cpus, count, whole in _core_demands(replica)
        if who != "front end"
    }
    frontend = _take(free, len(replica.frontend_cpu_ids()), False) if replica.frontend_cpus else ""
    memory_nodes = ",".join(str(node) for node in home.memory_node_ids())
    stages = tuple(
        dataclasses.replace(
            stage, cpus=bound[stage.cpus], numa_node=home.node, memory_nodes=memory_nodes
        )
        for stage in replica.stages
    )
    return dataclasses.replace(replica, numa_node=home.node, frontend_cpus=frontend, stages=stages)


def _stage_sets(replica: Replica) -> list[str]:
    return list(dict.fromkeys(stage.cpus for stage in replica.stages))


def _moves(planned: Profile, bound: Profile) -> tuple[Move, ...]:
    moves = []
    for before, after in zip(planned.replicas, bound.replicas, strict=True):
        for stage_before, stage_after in zip(before.stages, after.stages, strict=True):
            moves.append(
                Move(
                    before.index,
                    stage_before.name,
                    stage_before.cpus,
                    stage_after.cpus,
                    stage_before.smt_siblings,
                )
            )
        if before.frontend_cpus:
            moves.append(Move(before.index, "front end", before.frontend_cpus, after.frontend_cpus))
    return tuple(moves)


def _misfit(
    profile: Profile,
    facts: Facts,
    replica: Replica,
    homes: list[NodeCores],
    free: dict[int, list[PhysicalCore]],
) -> str:
    """One line: what the replica needs, what this process may use, the planned CPUs missing."""
    usable = set(facts.usable_cpus())
    parts = [f"{who} {count}" for who, _, count, _ in _core_demands(replica)]
    need = replica_cpu_count(replica)
    roomiest = max((len(free[home.node]) for home in homes), default=0)
    here = format_cpu_list(usable) or "none"
    missing = [
        f"CPU{'s' if len(lost) > 1 else ''} {format_cpu_list(lost)} "
        f"(replica {r.index} {stage.name})"
        for r in profile.replicas
        for stage in r.stages
        if (lost := stage.cpu_ids() - usable) and stage is _first_on(r, stage.cpus)
    ]
    line = (
        f"the profile's shape does not fit here: replica {replica.index} binds {need} "
        f"core{'s' if need != 1 else ''} on one node ({', '.join(parts)}), this process "
        f"may use {roomiest} on any one node (CPUs {here})"
    )
    if missing:
        shown = ", ".join(missing[:2]) + (
            f" and {len(missing) - 2} more" if len(missing) > 2 else ""
        )
        line += f"; planned {shown} not here"
    return line


def _first_on(replica: Replica, cpus: str) -> StagePlan:
    return next(stage for stage in replica.stages if stage.cpus == cpus)


def _forced(profile: Profile, homes: list[NodeCores]) -> Profile:
    """The shape squeezed onto what there is: each CPU set takes the next cores, wrapping
    around (so stages share cores where there are too few), on the first home."""
    if not homes:
        return profile
    home = homes[0]
    pool = list(home.cores)
    position = 0

    def take(count: int) -> str:
        nonlocal position
        count = min(count, len(pool))
        cpus = [pool[(position + i) % len(pool)].cpu for i in range(count)]
        position = (position + count) % len(pool)
        return format_cpu_list(cpus)

    memory_nodes = ",".join(str(node) for node in home.memory_node_ids())
    replicas = []
    for replica in profile.replicas:
        bound = {
            cpus: take(len(_first_on(replica, cpus).cpu_ids())) for cpus in _stage_sets(replica)
        }
        frontend = take(len(replica.frontend_cpu_ids())) if replica.frontend_cpus else ""
        stages = tuple(
            dataclasses.replace(
                stage, cpus=bound[stage.cpus], numa_node=home.node, memory_nodes=memory_nodes
            )
            for stage in replica.stages
        )
        replicas.append(
            dataclasses.replace(replica, numa_node=home.node, frontend_cpus=frontend, stages=stages)
        )
    return dataclasses.replace(profile, replicas=tuple(replicas))
