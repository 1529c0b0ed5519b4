"""Pure views of the facts that the planner reasons about: physical cores per memory home.

A replica's home is a node its memory can come from: a node holding memory in the
kernel's normal zones that the cgroup's cpuset.mems allows (not device memory, not
a node that repeats another). CPUs on a node without such memory (memoryless
nodes, nodes outside cpuset.mems) take the nearest memory by the distance table:
the nearest node with CPUs and memory where one is as near as any, else the
nearest memory-only node, bound as their memory while the replica stays on their
own node: a memory-only node is never a home. Nodes a buggy firmware table lists
with CPUs an earlier node holds (hwloc's one node) join that node's home: its
memory is theirs together. Allowed memory no home takes is spare: placement adds it
to a home that cannot hold a replica alone, nearest first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware.facts import Facts


@dataclass(frozen=True)
class PhysicalCore:
    """One physical core: the CPU its OpenMP thread binds to and its SMT siblings."""

    cpu: int  # the lowest usable logical CPU of the core
    siblings: tuple[int, ...]  # every online logical CPU of the core
    capacity: int  # relative speed; bigger is faster (hybrid / big.LITTLE)


@dataclass(frozen=True)
class NodeCores:
    """The usable physical cores of one replica's home: one node, or a group of nodes."""

    node: int  # the home: the first node memory comes from
    cores: tuple[PhysicalCore, ...]
    memory_bytes: int | None  # of every node in memory_nodes together
    memory_nodes: tuple[int, ...] = ()  # CPU_VISIBLE_MEMORY_NODES; () = (node,)
    cpu_nodes: tuple[int, ...] = ()  # the nodes its cores sit on
    # Memory of each node in memory_nodes (None where unknown).
    node_memory: dict[int, int | None] = field(default_factory=dict)
    # No one node holds the talker: its memory interleaves over memory_nodes.
    spanning: bool = False
    # Nodes of a buggy firmware table that are this one node (their CPUs are its CPUs):
    # their memory is in memory_nodes, and the home is one node.
    overlapping_nodes: tuple[int, ...] = ()

    def memory_node_ids(self) -> tuple[int, ...]:
        return self.memory_nodes or (self.node,)


def _core_capacity(facts: Facts, core_type: int) -> int:
    """Capacity of a core type: the kernel's cpu_capacity where stated, else by order."""
    if 0 <= core_type < len(facts.core_types):
        stated = facts.core_types[core_type].capacity
        if stated is not None:
            return stated
    # Without a stated capacity every core counts the same.
    return 1024


def nodes_with_cores(facts: Facts) -> list[NodeCores]:
    """Usable physical cores grouped by NUMA node; nodes without usable CPUs are left out.

    One OpenMP thread per physical core: SMT siblings share the core's execution
    units, and a second thread on them slows bandwidth-bound decode down.
    """
    usable = set(facts.usable_cpus())
    cpu_node = facts.node_of_cpu()
    memory = {node.id: node.memory_bytes for node in facts.numa_nodes}
    default_node = facts.numa_nodes[0].id if facts.numa_nodes else 0
    seen_cores: set[tuple[int, ...]] = set()
    by_node: dict[int, list[PhysicalCore]] = {}
    for entry in sorted(facts.cpus, key=lambda c: c.cpu):
        if entry.cpu not in usable:
            continue
        siblings = tuple(
            cpu
            for cpu in (parse_cpu_list(entry.thread_siblings) or (entry.cpu,))
            if cpu in usable or cpu == entry.cpu
        )
        key = tuple(sorted(set(siblings) | {entry.cpu}))
        if key in seen_cores:
            continue
        seen_cores.add(key)
        node = cpu_node.get(entry.cpu, entry.node if entry.node is not None else default_node)
        primary = min(cpu for cpu in key if cpu in usable)
        by_node.setdefault(node, []).append(
            PhysicalCore(cpu=primary, siblings=key, capacity=_core_capacity(facts, entry.core_type))
        )
    # CPUs the facts list no topology for (odd dumps): each is its own core.
    listed = {cpu for cores in by_node.values() for core in cores for cpu in core.siblings}
    for cpu in sorted(usable - listed):
        node = cpu_node.get(cpu, default_node)
        by_node.setdefault(node, []).append(PhysicalCore(cpu=cpu, siblings=(cpu,), capacity=1024))
    return _homes(facts, by_node, memory)


def _homes(
    facts: Facts, by_node: dict[int, list[PhysicalCore]], memory: dict[int, int | None]
) -> list[NodeCores]:
    """Each CPU node's cores under the node its memory comes from."""
    overlapping: dict[int, list[int]] = {}
    for entry in facts.numa_nodes:
        if entry.overlaps is not None and entry.id in facts.usable_memory_nodes():
            overlapping.setdefault(entry.overlaps, []).append(entry.id)
    joined = {node for nodes in overlapping.values() for node in nodes}
    allowed = sorted(set(facts.usable_memory_nodes()) - joined)
    with_cpus = [node for node in allowed if node in by_node]
    home_of: dict[int, int] = {}
    for cpu_node in sorted(by_node):
        if cpu_node in allowed or not allowed:
            home_of[cpu_node] = cpu_node
            continue
        # Its nearest memory; a node with CPUs of its own wins a tie (one replica there
        # rather than a second home on a memory-only node).
        closest = nearest(facts, cpu_node, allowed)
        with_own = nearest(facts, cpu_node, with_cpus) if with_cpus else None
        if with_own is not None and facts.node_distance(cpu_node, with_own) <= (
            facts.node_distance(cpu_node, closest)
        ):
            closest = with_own
        home_of[cpu_node] = closest
    grouped: dict[int, list[int]] = {}
    for cpu_node, home in home_of.items():
        grouped.setdefault(home, []).append(cpu_node)
    homes = []
    for home, cpu_nodes in sorted(grouped.items(), key=lambda item: min(item[1])):
        extra = tuple(overlapping.get(home, ()))
        memory_nodes = (home, *extra)
        sizes = [memory.get(node) for node in memory_nodes]
        homes.append(
            NodeCores(
                # A home without usable CPUs of its own (a memory-only node, a node whose
                # CPUs the cpuset does not allow) is where memory comes from, not where
                # the replica lives: the replica sits on its CPUs' node, memory bound there.
                node=home if home in by_node else min(cpu_nodes),
                cores=tuple(
                    sorted((c for n in cpu_nodes for c in by_node[n]), key=lambda c: c.cpu)
                ),
                memory_bytes=None if None in sizes else sum(sizes),  # type: ignore[arg-type]
                memory_nodes=memory_nodes,
                cpu_nodes=tuple(cpu_nodes),
                node_memory={node: memory.get(node) for node in memory_nodes},
                overlapping_nodes=extra,
            )
        )
    return homes


def spare_memory_nodes(facts: Facts, homes: list[NodeCores]) -> list[int]:
    """Allowed memory nodes no home binds (memory-only nodes, nodes whose CPUs the cpuset
    does not allow), each a node of its own (not a buggy table's repeat)."""
    taken = {node for home in homes for node in home.memory_node_ids()}
    return [
        node
        for node in facts.usable_memory_nodes()
        if node not in taken and (entry := facts.node(node)) is not None and entry.overlaps is None
    ]


def with_memory_node(facts: Facts, home: NodeCores, node_id: int) -> NodeCores:
    """The home with one more node's memory bound to it."""
    entry = facts.node(node_id)
    size = entry.memory_bytes if entry is not None else None
    total = None if home.memory_bytes is None or size is None else home.memory_bytes + size
    return dataclasses.replace(
        home,
        memory_bytes=total,
        memory_nodes=tuple(sorted({*home.memory_node_ids(), node_id})),
        node_memory={**home.node_memory, node_id: size},
    )


def nearest(facts: Facts, node_id: int, candidates: list[int]) -> int:
    """The candidate closest to `node_id` by the SLIT table (ties: the lowest id)."""
    return min(candidates, key=lambda other: (facts.node_distance(node_id, other), other))


def home_distance(facts: Facts, a: NodeCores, b: NodeCores) -> int:
    """How far apart two homes are: the closest pair of their nodes."""
    distances = [
        facts.node_distance(first, second)
        for first in a.memory_node_ids()
        for second in b.memory_node_ids()
    ]
    return min(distances, default=20)


def merge_homes(a: NodeCores, b: NodeCores) -> NodeCores:
    """One replica over both homes: their cores, their memory, the first as home."""
    first, second = (a, b) if a.node <= b.node else (b, a)
    memory = (
        None
        if first.memory_bytes is None or second.memory_bytes is None
        else first.memory_bytes + second.memory_bytes
    )
    return NodeCores(
        node=first.node,
        cores=tuple(sorted((*first.cores, *second.cores), key=lambda c: c.cpu)),
        memory_bytes=memory,
        memory_nodes=tuple(sorted({*first.memory_node_ids(), *second.memory_node_ids()})),
        cpu_nodes=tuple(sorted({*first.cpu_nodes, *second.cpu_nodes})),
        node_memory={**first.node_memory, **second.node_memory},
        overlapping_nodes=(*first.overlapping_nodes, *second.overlapping_nodes),
    )
