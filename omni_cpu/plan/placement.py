"""Where replicas live: one per memory home, nearest homes grouped where one is too small.

Pure, like the rest of the planner. A home (omni_cpu.plan.topology) whose memory
cannot hold a whole replica is merged with its nearest home by the distance
table, smallest first, until every replica fits; the last home left too small
adds the allowed memory no home binds (memory-only nodes, nodes whose CPUs the
cpuset does not allow), nearest first, so one replica spans the fewest nodes
that hold it. A buggy firmware table's one node is one node: its memory is all
its listed nodes', and no one of them must hold the talker. vLLM binds a worker's
memory to its first CPU's node, so the talker must fit one node of its group; where no node
of the machine can hold it, the groups are formed again with the talker's memory
interleaved over its group's nodes (a *spanning* replica, what vLLM's CPU
backend does for a worker whose memory nodes are several). A machine that cannot
hold even one replica is refused in one line that states what it needs and what
it has, to the precision that shows the gap, and what would fit instead. A CPU
quota (cgroup cpu.max / CFS) caps the cores each replica binds.
"""

from __future__ import annotations

import dataclasses
import math

from omni_cpu import envs
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.errors import MachineTooSmallError
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import costs
from omni_cpu.plan.footprint import DTYPE_BYTES, ModelFootprint, footprint_for_model
from omni_cpu.plan.topology import (
    NodeCores,
    home_distance,
    merge_homes,
    nodes_with_cores,
    spare_memory_nodes,
    with_memory_node,
)
from omni_cpu.weight_formats import INT8, MODEL


def replica_fixed_memory_bytes(
    footprint: ModelFootprint, dtype: str, weights: str = "model"
) -> int:
    """Everything one replica holds besides the KV caches (measured, see costs)."""
    return (
        footprint.talker_weight_bytes(dtype, weights)
        + costs.TALKER_STAGE_OVERHEAD_BYTES
        + footprint.code2wav_weight_bytes(dtype)
        + costs.CODE2WAV_STAGE_OVERHEAD_BYTES
        + costs.CODE2WAV_PACKED_COPIES * costs.CODE2WAV_PACKED_WEIGHTS * DTYPE_BYTES[dtype]
        + costs.DRIVER_PROCESS_BYTES
    )


def per_seq_kv_bytes(footprint: ModelFootprint, dtype: str) -> int:
    """Talker KV bytes one stream reserves: a whole max_model_len, in whole blocks."""
    blocks = math.ceil(costs.TALKER_MAX_MODEL_LEN / costs.KV_BLOCK_TOKENS)
    return footprint.talker_kv_bytes_per_token(dtype) * blocks * costs.KV_BLOCK_TOKENS


def reserved_kv_bytes(footprint: ModelFootprint, dtype: str) -> int:
    """Talker KV bytes no stream gets: the block pool's null block."""
    tokens = costs.KV_RESERVED_BLOCKS * costs.KV_BLOCK_TOKENS
    return footprint.talker_kv_bytes_per_token(dtype) * tokens


def replica_need_bytes(footprint: ModelFootprint, dtype: str, weights: str = "model") -> int:
    """The least memory one replica can run in: fixed memory plus one stream's KV."""
    return (
        replica_fixed_memory_bytes(footprint, dtype, weights)
        + costs.CODE2WAV_KV_CACHE_BYTES
        + reserved_kv_bytes(footprint, dtype)
        + per_seq_kv_bytes(footprint, dtype)
    )


def talker_node_need_bytes(footprint: ModelFootprint, dtype: str, weights: str = "model") -> int:
    """What the talker's own node must hold: vLLM binds a worker's memory to one node."""
    return (
        footprint.talker_weight_bytes(dtype, weights)
        + costs.TALKER_STAGE_OVERHEAD_BYTES
        + reserved_kv_bytes(footprint, dtype)
        + per_seq_kv_bytes(footprint, dtype)
    )


def largest_node_room(facts: Facts, home: NodeCores) -> int | None:
    """What the biggest node of a multi-node home gives one stage; None for one node."""
    if len(home.memory_node_ids()) < 2 or home.overlapping_nodes:
        return None
    sizes = [node_memory_bytes(facts, home.node_memory.get(n), []) for n in home.memory_node_ids()]
    if not all(sizes):
        return None  # unknown: the home's total decides alone
    largest = max(sizes)  # type: ignore[type-var]
    return largest - safety_margin(largest)  # type: ignore[operator]


def node_memory_bytes(facts: Facts, node_memory: int | None, notes: list[str]) -> int | None:
    """A node's memory, trusting /proc/meminfo where the node figures cannot be right.

    Some virtual machines and sandboxes report node meminfo that sums to far less
    than the machine's MemTotal; then the nodes are scaled up to match it.
    """
    stated = sum(n.memory_bytes or 0 for n in facts.numa_nodes if n.duplicate_of is None)
    total = facts.memory_total_bytes
    if facts.host is not None and facts.numa_node_count < facts.host.numa_node_count:
        return node_memory  # MemTotal holds nodes this process may not use: no measure
    if node_memory and total and stated < costs.NODE_MEMORY_CREDIBLE_FRACTION * total:
        notes.append(
            f"node meminfo sums to {stated / costs.GIB:.1f} GiB but /proc/meminfo says "
            f"{total / costs.GIB:.1f} GiB: node memory scaled to match"
        )
        return node_memory * total // stated
    return node_memory


def safety_margin(budget: int) -> int:
    return max(costs.MEMORY_SAFETY_MIN_BYTES, int(budget * costs.MEMORY_SAFETY_FRACTION))


def home_memory_bytes(facts: Facts, home: NodeCores, notes: list[str]) -> int | None:
    """The memory of a home's nodes together (scaled where node meminfo is not credible)."""
    known = [
        node_memory_bytes(facts, home.node_memory.get(node), notes)
        for node in home.memory_node_ids()
    ]
    if known and all(known):
        return sum(known)  # type: ignore[arg-type]
    if facts.memory_total_bytes:
        # Nodes that do not state their memory share what MemTotal leaves after the
        # nodes that do (memory-only nodes, a GPU's memory), not a share of all of it.
        listed = [node for node in facts.numa_nodes if node.duplicate_of is None]
        stated = sum(node.memory_bytes or 0 for node in listed)
        unstated = sum(1 for node in listed if not node.memory_bytes)
        share = max(0, facts.memory_total_bytes - stated) // max(1, unstated)
        return sum(memory or share for memory in known)
    return None


def memory_budget(
    facts: Facts, home: NodeCores, replica_count: int, fit_available: bool, notes: list[str]
) -> int | None:
    """Bytes one replica may use: its nodes' memory, or its share of a cgroup limit."""
    candidates = []
    memory = home_memory_bytes(facts, home, notes)
    if memory:
        candidates.append(memory)
    if facts.limits.memory_max_bytes is not None:
        candidates.append(facts.limits.memory_max_bytes // replica_count)
    if fit_available and facts.memory_available_bytes:
        candidates.append(facts.memory_available_bytes // replica_count)
    if not candidates:
        return None
    budget = min(candidates)
    return budget - safety_margin(budget)


def place_replicas(
    facts: Facts,
    footprint: ModelFootprint,
    dtype: str,
    weights: str,
    fit_available: bool,
    notes: list[str],
) -> list[NodeCores]:
    """The homes replicas get: grouped until each holds a replica, then quota-capped.

    Spanning replicas are planned only where no replica fits with its talker on one node.
    """
    homes = nodes_with_cores(facts)
    try:
        placed = _group_homes(facts, homes, footprint, dtype, weights, fit_available, False)
    except MachineTooSmallError:
        placed = _group_homes(facts, homes, footprint, dtype, weights, fit_available, True)
    need = replica_need_bytes(footprint, dtype, weights)
    talker_need = talker_node_need_bytes(footprint, dtype, weights)
    for home in placed:
        nodes = "+".join(str(node) for node in home.memory_node_ids())
        if home.overlapping_nodes:
            notes.append(
                f"the NUMA table lists node {home.node}'s CPUs in nodes "
                f"{format_cpu_list(home.overlapping_nodes)} too (buggy firmware): planned as "
                f"one node, its memory bound over nodes {nodes}"
            )
        elif home.spanning:
            room = largest_node_room(facts, home) or 0
            need_text, room_text = gib_pair(talker_need, room)
            notes.append(
                f"no NUMA node holds the talker (it needs about {need_text} on one node, the "
                f"largest gives it {room_text}): nodes {nodes} form one spanning replica whose "
                f"talker memory interleaves over them ({envs.INTERLEAVE_MEMORY.name}=1)"
            )
        elif len(home.memory_node_ids()) > 1:
            notes.append(
                f"one node cannot hold a replica (needs {need / costs.GIB:.1f} GiB): nodes "
                f"{nodes} form one replica with its memory bound to them"
            )
    return _cap_to_quota(facts, placed, notes)


def _group_homes(
    facts: Facts,
    homes: list[NodeCores],
    footprint: ModelFootprint,
    dtype: str,
    weights: str,
    fit_available: bool,
    spanning: bool,
) -> list[NodeCores]:
    """Merge the smallest home with its nearest until each holds a replica, or refuse.

    `spanning`: a group's talker may interleave over its nodes, so only the group's
    total memory must hold the replica.
    """
    need = replica_need_bytes(footprint, dtype, weights)
    talker_need = talker_node_need_bytes(footprint, dtype, weights)

    def fits(home: NodeCores, count: int) -> bool:
        budget = memory_budget(facts, home, count, fit_available, [])
        room = None if spanning else largest_node_room(facts, home)
        return (budget is None or budget >= need) and (room is None or room >= talker_need)

    while True:
        count = len(homes)
        small = [home for home in homes if not fits(home, count)]
        if not small:
            break
        if count == 1:
            spare = spare_memory_nodes(facts, homes)
            if spare:  # the nearest memory no home binds
                home = homes[0]
                nearest = min(
                    spare,
                    key=lambda n: (
                        min(facts.node_distance(m, n) for m in home.memory_node_ids()),
                        n,
                    ),
                )
                homes = [with_memory_node(facts, home, nearest)]
                continue
            budget = memory_budget(facts, homes[0], 1, fit_available, [])
            raise refusal(facts, footprint, dtype, weights, budget or 0, fit_available)
        # Smallest first; it joins its nearest home, preferring one that is too small too.
        home = min(small, key=lambda h: (h.memory_bytes or 0, h.node))
        others = [other for other in homes if other is not home]
        partner = min(
            others,
            key=lambda o: (
                home_distance(facts, home, o),
                fits(o, count),
                o.memory_bytes or 0,
                o.node,
            ),
        )
        merged = merge_homes(home, partner)
        homes = sorted(
            [h for h in homes if h is not home and h is not partner] + [merged],
            key=lambda h: h.node,
        )
    if not spanning:
        return homes
    return [
        dataclasses.replace(home, spanning=True)
        if len(home.memory_node_ids()) > 1 and (largest_node_room(facts, home) or 0) < talker_need
        else home
        for home in homes
    ]


def gib_pair(first: int, second: int) -> tuple[str, str]:
    """Two sizes in GiB at the fewest decimals (1 to 3) that tell them apart, else in bytes."""
    for decimals in (1, 2, 3):
        a, b = f"{first / costs.GIB:.{decimals}f}", f"{second / costs.GIB:.{decimals}f}"
        if a != b or first == second:
            return f"{a} GiB", f"{b} GiB"
    return f"{first} bytes", f"{second} bytes"


def _cap_to_quota(facts: Facts, homes: list[NodeCores], notes: list[str]) -> list[NodeCores]:
    """Bind no more threads than the CPU quota runs: the quota is shared by every replica."""
    quota = facts.limits.cpu_quota_cores
    total = sum(len(home.cores) for home in homes)
    if quota is None or total <= quota:
        return homes
    allowed = max(1, math.floor(quota + 1e-9))
    if allowed < len(homes):
        homes = homes[:allowed]
    share = max(1, allowed // len(homes))
    notes.append(
        f"CPU quota {quota:g} cores (cgroup cpu.max) for {total} usable cores: "
        f"{len(homes)} replica(s) of at most {share} core(s)"
    )
    capped = []
    for home in homes:
        fastest = sorted(home.cores, key=lambda c: (-c.capacity, c.cpu))[:share]
        capped.append(dataclasses.replace(home, cores=tuple(sorted(fastest, key=lambda c: c.cpu))))
    return capped


def refusal(
    facts: Facts,
    footprint: ModelFootprint,
    dtype: str,
    weights: str,
    budget: int,
    fit_available: bool,
) -> MachineTooSmallError:
    """One line: what the model needs, what the machine gives, what would fit instead.

    Both sizes are printed at the precision that shows the gap (7.0 against 6.96 GiB,
    never 7.0 against 7.0). A replica may span nodes, so the machine's memory decides.
    """
    need = replica_need_bytes(footprint, dtype, weights)
    have = max(budget, 0)
    what = "free memory" if fit_available else "memory"
    need_text, have_text = gib_pair(need, have)
    message = (
        f"{footprint.name} needs about {need_text} for one replica "
        f"({dtype}, one stream) but this machine's {what} gives it {have_text}"
    )
    choices = _smaller_choices(facts, footprint, weights)
    fitting = [
        f"{flag} (about {gib_pair(replica_need_bytes(model, dtype, w), have)[0]})"
        for flag, model, w in choices
        if replica_need_bytes(model, dtype, w) <= have
    ]
    if fitting:
        return MachineTooSmallError(message, "would fit: " + "; ".join(fitting))
    tried = ", ".join(
        f"{flag} {gib_pair(replica_need_bytes(model, dtype, w), have)[0]}"
        for flag, model, w in choices
    )
    fix = f"it needs a machine with about {(need + safety_margin(need)) / costs.GIB:.1f} GiB"
    if tried:
        fix = f"nothing smaller fits ({tried}); {fix}"
    return MachineTooSmallError(message, fix)


def _smaller_choices(
    facts: Facts, footprint: ModelFootprint, weights: str
) -> list[tuple[str, ModelFootprint, str]]:
    """(flags, footprint, weights) of each smaller way to run: int8 weights, the 0.6B model."""
    # int4 is already smaller than int8, and moves the audio more: suggest int8 only over
    # the checkpoint's dtype, and only where its kernels run.
    int8 = weights == MODEL.name and INT8.runs_on(facts.architecture, facts.isa)
    choices = [(f"--weights {INT8.name}", footprint, INT8.name)] if int8 else []
    smaller = footprint_for_model("0.6b")
    if footprint.talker_params > smaller.talker_params:
        choices.append(("--model 0.6b", smaller, weights))
        if int8:
            choices.append((f"--model 0.6b --weights {INT8.name}", smaller, INT8.name))
    return choices
