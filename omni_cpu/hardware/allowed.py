"""The allowed view: what this process may use, counted as hwloc's default view counts it.

One place for the rules (hwloc keeps the objects that hold an allowed CPU or an allowed
memory node, and drops the rest):

- **CPUs**: the online CPUs the cgroup's cpuset.cpus allows (every online CPU where it
  allows none of them).
- **NUMA nodes** in view: those holding an allowed CPU or memory cpuset.mems allows; a
  node's CPU list keeps its allowed CPUs only. Listed and counted: where cpuset.mems is
  stated, the nodes it allows (a node is its memory: hwloc removes the nodes outside its
  allowed nodeset, so CPUs allowed on a node whose memory is not sit in no listed node,
  and a CPU-only node, never in the kernel's mems, is never listed); without it, every
  node in view is listed and those holding CPUs or stated memory are counted
  (omni_cpu.hardware.numa).
- **Packages**: those holding an allowed CPU or a counted node. A node sits in the
  package that holds its locality: its own online CPUs, else the CPUs of the nodes that
  reach it best (HMAT initiators), else those of the nodes strictly nearest to it by
  the distance table (where it is nearer to some nodes than to itself and the rest); a
  node whose locality spans packages, or that has none, sits in no package.

The whole machine stays in `Facts.host`.
"""

from __future__ import annotations

import dataclasses

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.cpu import Topology
from omni_cpu.hardware.facts import CPUS_ONLY, EMPTY, Limits, NumaNode
from omni_cpu.hardware.numa import count_nodes, counts


def allowed_cpus(online: tuple[int, ...], limits: Limits) -> tuple[int, ...]:
    """The online CPUs the cgroup's cpuset allows (all of them where it allows none)."""
    if limits.cpuset_cpus is None:
        return online
    allowed = tuple(cpu for cpu in online if cpu in set(parse_cpu_list(limits.cpuset_cpus)))
    return allowed or online


def memory_allowed(limits: Limits) -> frozenset[int] | None:
    """The nodes cpuset.mems allows; None where the cgroup does not state it."""
    if limits.cpuset_mems is None:
        return None
    return frozenset(parse_cpu_list(limits.cpuset_mems)) or None


def allowed_nodes(
    nodes: list[NumaNode], allowed: tuple[int, ...], limits: Limits
) -> list[NumaNode]:
    """Nodes holding allowed CPUs or memory cpuset.mems allows, their CPUs narrowed.

    A node keeps its kind (what the machine made it). Where the cpuset and mems leave
    no node, every node stays.
    """
    allowed_set = set(allowed)
    mems = memory_allowed(limits)
    kept = []
    for node in nodes:
        cpus = [cpu for cpu in parse_cpu_list(node.cpus) if cpu in allowed_set]
        memory = node.kind not in (CPUS_ONLY, EMPTY) and (mems is None or node.id in mems)
        if cpus or memory:
            kept.append(dataclasses.replace(node, cpus=format_cpu_list(cpus)))
    return kept or nodes


def listed_nodes(nodes: list[NumaNode], limits: Limits) -> list[NumaNode]:
    """The nodes in view that cpuset.mems allows, where it states any of them (hwloc's
    default view drops the rest); every node in view where it does not."""
    mems = memory_allowed(limits)
    if mems is None or not any(node.id in mems for node in nodes):
        return nodes
    return [node for node in nodes if node.id in mems]


def count_allowed_nodes(nodes: list[NumaNode], stated: bool, limits: Limits) -> tuple[int, str]:
    """(the nodes of the allowed view, how they were counted)."""
    mems = memory_allowed(limits)
    if mems is not None and not any(counts(node, mems) for node in nodes):
        mems = None  # mems naming no listed node (a stale dump) narrows nothing
    return count_nodes(nodes, stated, mems)


def count_allowed_packages(
    host: Topology,
    allowed: tuple[int, ...],
    host_nodes: list[NumaNode],
    nodes: list[NumaNode],
    stated: bool,
    limits: Limits,
) -> tuple[int | None, str]:
    """(the packages holding an allowed CPU or a counted node, where that count came from)."""
    if not host.sockets:  # unstated (None) or no package information (0)
        return host.sockets, host.sockets_source
    packages = {host.package_of[cpu] for cpu in allowed if cpu in host.package_of}
    mems = memory_allowed(limits)
    if not set(host.package_of) - set(allowed) and mems is None:
        return len(packages), host.sockets_source  # the whole machine
    by_cpus = len(packages)
    if mems is not None and not any(counts(node, mems) for node in nodes):
        mems = None
    memory_homes = []
    for node in nodes if stated else []:
        if counts(node, mems):
            package = _package_of_node(host, node.id, host_nodes)
            if package is not None and package not in packages:
                packages.add(package)
                memory_homes.append(node.id)
    source = f"{host.sockets_source}: the {by_cpus} holding allowed CPUs"
    if memory_homes:
        source += f", and {len(memory_homes)} holding allowed memory (nodes "
        source += f"{format_cpu_list(memory_homes)})"
    return len(packages), source


def node_locality(node_id: int, nodes: list[NumaNode]) -> set[int]:
    """The CPUs a node's memory is local to: its own, its initiators', or its nearest's."""
    by_id = {node.id: node for node in nodes}
    node = by_id.get(node_id)
    if node is None:
        return set()
    own = set(parse_cpu_list(node.cpus))
    if own:
        return own
    from_initiators = {
        cpu
        for initiator in node.initiators
        if initiator != node_id and initiator in by_id
        for cpu in parse_cpu_list(by_id[initiator].cpus)
    }
    if from_initiators:
        return from_initiators
    others = [other for other in by_id if other != node_id]
    if not others or not node.distances:
        return set()
    nearest = min(node.distance_to(other) for other in others)
    closest = [other for other in others if node.distance_to(other) == nearest]
    # Not nearer to some nodes than to itself and the rest: it is local to none.
    if nearest <= node.distance_to(node_id) or len(closest) == len(others):
        return set()
    return {cpu for other in closest for cpu in parse_cpu_list(by_id[other].cpus)}


def _package_of_node(host: Topology, node_id: int, host_nodes: list[NumaNode]) -> object | None:
    """The one package that holds the node's locality; None where it spans several or none."""
    packages = {
        host.package_of[cpu] for cpu in node_locality(node_id, host_nodes) if cpu in host.package_of
    }
    return packages.pop() if len(packages) == 1 else None
