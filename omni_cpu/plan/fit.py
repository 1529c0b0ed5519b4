"""Does a checked-in profile still fit this machine? One line per problem. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from omni_cpu import envs
from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan.bind import PRELOAD_FILES, Binding, preload_paths
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.policy import (
    choose_dtype,
    node_memory_bytes,
    replica_fixed_memory_bytes,
    unrunnable,
)
from omni_cpu.profile import choices
from omni_cpu.profile.model import Profile, StagePlan

# Kinds that are said, never failed on: a stage starts without a preload it cannot find.
WARNS = frozenset({"preload"})


@dataclass(frozen=True)
class Problem:
    """One way a profile does not fit a machine. Callers decide what is fatal by kind.

    Kinds: "cpu" (CPUs that do not exist, are offline or barred: threads would bind
    to nothing), "shape" (more cores per node than this process may use), "overlap"
    (two stages or replicas on one CPU), "numa" (memory bound away from its CPUs),
    "dtype" (bf16 without native bf16), "isa" (a weight format whose kernels this CPU
    cannot run), "preload" (a library to preload that the runtime lacks: a warning,
    WARNS), "memory"
    (more than the node or limit holds), "model" (planned for another kind of model).
    """

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


def check_profile(
    profile: Profile, facts: Facts, footprint: ModelFootprint | None = None
) -> list[str]:
    """Problems that would make the profile fail or misbehave on `facts`' machine, as
    written (not bound: omni_cpu.plan.bind)."""
    return [problem.message for problem in check_problems(profile, facts, footprint)]


def failing_and_said(problems: list[Problem]) -> tuple[list[str], list[str]]:
    """The problems `validate` fails on, and the ones it only says (WARNS: a preload the
    runtime lacks, which the stages start without)."""
    failing = [problem.message for problem in problems if problem.kind not in WARNS]
    return failing, [problem.message for problem in problems if problem.kind in WARNS]


def check_problems(
    profile: Profile,
    facts: Facts,
    footprint: ModelFootprint | None = None,
    *,
    binding: Binding | None = None,
) -> list[Problem]:
    """`check_profile` with each problem's kind; with `binding`, of the profile it bound,
    its misfit first (kind "shape")."""
    machine = _Machine.of(facts)
    claims = _Claims()
    problems: list[Problem] = []
    if binding is not None and binding.misfit:
        problems.append(Problem("shape", binding.misfit))
    problems += _preload_problems(profile, facts)
    problems += _isa_problems(profile, facts)
    for at, replica in enumerate(profile.replicas):
        claimed_by_replica: list[set[int]] = []
        for position, stage in enumerate(replica.stages):
            who = (
                f"omni_cpu.replicas[{at}].stages[{position}].cpus "
                f"(replica {replica.index} {stage.name})"
            )
            cpus = set(stage.cpu_ids())
            problems += _cpu_problems(who, cpus, machine)
            problems += _numa_problems(who, stage, cpus, machine, facts)
            # Stages given the very same cores share them on purpose (--stages 1, or
            # a one-core machine); a partial overlap is a mistake.
            if cpus not in claimed_by_replica:
                problems += claims.claim(cpus, who)
                claimed_by_replica.append(cpus)
        frontend = set(replica.frontend_cpu_ids())
        field = f"omni_cpu.replicas[{at}].frontend_cpus"
        problems += claims.claim(frontend, f"{field} (replica {replica.index} front end)")
        if frontend - machine.usable:
            problems.append(
                Problem(
                    "cpu",
                    f"{field} (replica {replica.index} front end): CPUs "
                    f"{format_cpu_list(frontend - machine.usable)} are not usable here",
                )
            )
    problems += _dtype_problems(profile, facts)
    problems += _model_problems(profile, footprint)
    problems += _memory_problems(profile, facts, footprint)
    return problems


@dataclass(frozen=True)
class _Machine:
    """The CPU and node sets a profile's stages are checked against."""

    online: set[int]
    possible: set[int]
    usable: set[int]
    node_of: dict[int, int]
    memory_nodes: set[int]

    @classmethod
    def of(cls, facts: Facts) -> _Machine:
        # The machine's online CPUs, not only the cpuset's: a CPU outside the cpuset is
        # barred (said by _cpu_problems), not offline.
        host_online = facts.host.online_cpus if facts.host is not None else facts.online_cpus
        online = set(parse_cpu_list(host_online))
        return cls(
            online=online,
            possible=set(parse_cpu_list(facts.possible_cpus)) | online,
            usable=set(facts.usable_cpus()),
            node_of=facts.node_of_cpu(),
            memory_nodes=set(facts.usable_memory_nodes()),
        )


class _Claims:
    """Which stage or front end holds each CPU: a second claim on one is an overlap."""

    def __init__(self) -> None:
        self.owner: dict[int, str] = {}

    def claim(self, cpus: set[int], who: str) -> list[Problem]:
        problems = []
        for cpu in sorted(cpus):
            if cpu in self.owner:
                problems.append(
                    Problem("overlap", f"CPU {cpu} is used by both {self.owner[cpu]} and {who}")
                )
            else:
                self.owner[cpu] = who
        return problems


def _cpu_problems(who: str, cpus: set[int], machine: _Machine) -> list[Problem]:
    """CPUs a stage names that do not exist, are offline, or are barred to this process."""
    problems = []
    missing = cpus - machine.possible
    if missing:
        problems.append(Problem("cpu", f"{who}: CPUs {format_cpu_list(missing)} do not exist here"))
    offline = (cpus & machine.possible) - machine.online
    if offline:
        problems.append(Problem("cpu", f"{who}: CPUs {format_cpu_list(offline)} are offline"))
    barred = (cpus & machine.online) - machine.usable
    if barred:
        problems.append(
            Problem(
                "cpu",
                f"{who}: CPUs {format_cpu_list(barred)} are outside this process's "
                "cgroup cpuset or affinity",
            )
        )
    return problems


def _numa_problems(
    who: str, stage: StagePlan, cpus: set[int], machine: _Machine, facts: Facts
) -> list[Problem]:
    """A stage's memory bound away from its CPUs, or to nodes with no memory for it."""
    problems = []
    nodes = {machine.node_of[cpu] for cpu in cpus if cpu in machine.node_of}
    # A stage may span nodes whose memory it may use, and memoryless nodes;
    # CPUs on a node with memory it is not bound to read memory remotely.
    remote = sorted((nodes & machine.memory_nodes) - set(stage.memory_node_ids()))
    if len(nodes) > 1 and remote:
        problems.append(
            Problem(
                "numa",
                f"{who}: its CPUs span NUMA nodes {sorted(nodes)}, and its memory "
                f"(nodes {stage.memory_nodes or stage.numa_node}) is not on {remote}",
            )
        )
    elif nodes and stage.numa_node not in nodes:
        problems.append(
            Problem(
                "numa",
                f"{who}: numa_node is {stage.numa_node} but its CPUs are on node "
                f"{sorted(nodes)[0]}",
            )
        )
    absent = set(stage.memory_node_ids()) - machine.memory_nodes
    if absent and facts.numa_stated:
        problems.append(
            Problem(
                "numa",
                f"{who}: memory nodes {sorted(absent)} hold no memory this process may use",
            )
        )
    return problems


def _dtype_problems(profile: Profile, facts: Facts) -> list[Problem]:
    """Stages in bfloat16 on a CPU without it: named at the first such stage's own line."""
    bf16 = [
        (at, stage)
        for at, r in enumerate(profile.replicas)
        for stage in r.stages
        if stage.dtype == "bfloat16"
    ]
    if bf16 and choose_dtype(facts) != "bfloat16" and facts.isa_source is not None:
        names = sorted({stage.name for _, stage in bf16})
        at, first = bf16[0]
        return [
            Problem(
                "dtype",
                f"{_sizes_home(at, first.stage_id)}.dtype bfloat16 ({', '.join(names)}): this "
                "CPU has no native bf16 (avx512_bf16/amx_bf16/bf16); use float32",
            )
        ]
    return []


def _model_problems(profile: Profile, footprint: ModelFootprint | None) -> list[Problem]:
    if footprint is not None and profile.model_kind and footprint.kind != profile.model_kind:
        return [
            Problem(
                "model",
                f"omni_cpu.model_kind: the profile was planned for a {profile.model_kind} "
                f"model ({profile.model}) "
                f"but is used with a {footprint.kind} model ({footprint.name}); re-plan it "
                f"with `omni-cpu probe --model {footprint.name} --output FILE`",
            )
        ]
    return []


def _memory_problems(
    profile: Profile, facts: Facts, footprint: ModelFootprint | None
) -> list[Problem]:
    problems = []
    memory = {node.id: node_memory_bytes(facts, node.memory_bytes, []) for node in facts.numa_nodes}
    limit = facts.limits.memory_max_bytes
    weights = profile.choice(envs.WEIGHTS)
    for at, replica in enumerate(profile.replicas):
        need = sum(stage.kv_cache_memory_bytes for stage in replica.stages)
        if footprint is not None:
            need += replica_fixed_memory_bytes(footprint, replica.talker.dtype, weights)
        homes = sorted({node for stage in replica.stages for node in stage.memory_node_ids()})
        known = [memory.get(node) for node in homes]
        have = sum(known) if known and all(known) else None  # type: ignore[arg-type]
        if limit is not None:
            share = limit // len(profile.replicas)
            have = share if have is None else min(have, share)
        if have is not None and need > have:
            problems.append(
                Problem(
                    "memory",
                    f"{_sizes_home(at, 0)}.kv_cache_memory_bytes: replica "
                    f"{replica.index} needs {need / 2**30:.1f} GiB "
                    f"but nodes {homes} / the memory limit allow {have / 2**30:.1f} GiB",
                )
            )
    return problems


def _preload_problems(profile: Profile, facts: Facts) -> list[Problem]:
    """The libraries `omni_cpu.preload` names that the runtime here lacks, in one line
    (live facts only: a dump holds no libraries). Never fatal (WARNS): start-up preloads
    what there is."""
    if facts.source != "live":
        return []
    found = preload_paths(profile.preload, facts.preload_libraries)
    missing = [name for name in profile.preload if name not in found]
    if not missing:
        return []
    files = ", ".join(f"{name} ({' or '.join(PRELOAD_FILES[name])})" for name in missing)
    install = "; ".join(PRELOAD_INSTALL[name] for name in missing)
    them = "them" if len(missing) > 1 else "it"
    return [
        Problem(
            "preload",
            f"omni_cpu.preload: {files} not in this runtime: the stages start without "
            f"{them} ({install} to add {them})",
        )
    ]


# How to get each library omni_cpu.preload may name.
PRELOAD_INSTALL = {
    "intel-openmp": "pip install intel-openmp",
    "tcmalloc": "apt-get install libtcmalloc-minimal4",
}


def _isa_problems(profile: Profile, facts: Facts) -> list[Problem]:
    """A talker weight format whose kernels need instructions this CPU lacks."""
    reason = unrunnable(profile.choice(envs.WEIGHTS), facts)
    if reason is None or facts.isa_source is None:
        return []
    problem, instead = reason
    fix = f"use {instead}" if instead else "no weight format runs here"
    return [Problem("isa", f"stages[0].additional_config.omni_cpu.weights {problem}: {fix}")]


def _sizes_home(position: int, stage_id: int) -> str:
    """Where a replica's stage sizes are written (replica 0's in the deploy config's stages):
    the stage's own key, so a problem points at its line, not at `stages:`. The talker
    (stage 0) holds the KV bytes a memory problem is about."""
    stages = "stages" if position == 0 else f"omni_cpu.replicas[{position}].stages"
    return f"{stages}[{stage_id}]"


KERNEL_CHOICES = (envs.AMX_ROWS, envs.GEMV)  # what `probe --calibrate` chose
KERNEL_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def kernel_notes(profile: Profile, facts: Facts) -> list[str]:
    """Why a profile's measured kernel choice may not suit this machine (not a failure)."""
    talker = profile.replicas[0].talker.choices
    chosen = {
        name: talker[name]
        for name in (choices.NAME_OF[knob.name] for knob in KERNEL_CHOICES)
        if talker.get(name, "auto") != "auto"
    }
    if not chosen:
        return []
    here = " / ".join(facts.model_names) or "unknown"
    planned_isa = {flag for flag in profile.machine.isa if flag in KERNEL_ISA}
    isa_here = {flag for flag in facts.isa if flag in KERNEL_ISA}
    if profile.machine.model_name == here and planned_isa == isa_here:
        return []
    differs = sorted(planned_isa ^ isa_here)
    return [
        "the kernel choice ("
        + ", ".join(f"{key}={value}" for key, value in chosen.items())
        + f") was measured on {profile.machine.model_name}, not on this {here}"
        + (f" (ISA differs: {' '.join(differs)})" if differs else "")
        + ": re-run `omni-cpu probe --calibrate --output FILE` here"
    ]
