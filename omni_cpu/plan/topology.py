"""Pure views of the facts that the planner reasons about: physical cores per NUMA node."""

from __future__ import annotations

from dataclasses import dataclass

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
    """The usable physical cores of one NUMA node."""

    node: int
    cores: tuple[PhysicalCore, ...]
    memory_bytes: int | None


def _cpu_to_node(facts: Facts) -> dict[int, int]:
    mapping: dict[int, int] = {}
    for node in facts.numa_nodes:
        for cpu in parse_cpu_list(node.cpus):
            mapping[cpu] = node.id
    return mapping


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
    cpu_node = _cpu_to_node(facts)
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
    return [
        NodeCores(
            node=node,
            cores=tuple(sorted(cores, key=lambda c: c.cpu)),
            memory_bytes=memory.get(node),
        )
        for node, cores in sorted(by_node.items())
    ]
