"""NUMA nodes from /sys/devices/system/node, and the one-node fallback.

Node ids may be sparse (0, 2, 3). A node may hold memory and no CPUs (CXL, HBM),
memory only in ZONE_MOVABLE (a GPU's memory, hot-plugged device memory: in
has_memory, not in has_normal_memory), CPUs and no memory (memoryless), or be a
generic initiator (an accelerator); the kernel's node state masks say which
(Documentation/ABI/stable/sysfs-devices-node), each node's `distance` row says how
far the others are and `access0/initiators` which nodes reach a memory node best
(Documentation/admin-guide/mm/numaperf.rst). A node's cpulist can name CPUs that
are not online (s390, hot-unplugged CPUs): only online CPUs are kept. A node that
repeats an earlier one exactly (the same CPUs, the same memory: firmware listing one
node several times) is marked a duplicate; one whose CPUs an earlier node already
lists, with memory of its own (buggy firmware naming every CPU in every node), is
marked as overlapping that node: hwloc drops both, as no CPU is in two nodes. A
CPU-less node that a DAX device onlines through the kmem driver (its
/sys/bus/dax/devices/daxX.Y/target_node) is memory like any other, ZONE_MOVABLE or
not: of kind NVM where the device sits on an NVDIMM bus (`ndbus` in its sysfs
path), memory-only otherwise (soft-reserved or CXL RAM), as hwloc's DAXType says.
A machine or dump without a node directory is one node holding every online CPU
and all of /proc/meminfo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.facts import (
    CPUS_AND_MEMORY,
    CPUS_ONLY,
    DEVICE_MEMORY,
    EMPTY,
    GENERIC_INITIATOR,
    MEMORY_ONLY,
    NO_CPUS_MEMORY_UNSTATED,
    NVM,
    NumaNode,
)
from omni_cpu.hardware.sysroot import SysRoot, numbered_entries

NODE_DIR = "/sys/devices/system/node"
DAX_DIR = "/sys/bus/dax"


def parse_meminfo(text: str | None) -> dict[str, int]:
    """`MemTotal: 123 kB` (or node meminfo's `Node 0 MemTotal: 123 kB`) → bytes."""
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        name = key.split()[-1] if key.split() else ""
        fields = rest.split()
        if not name or not fields:
            continue
        try:
            number = int(fields[0])
        except ValueError:
            continue
        unit = fields[1].lower() if len(fields) > 1 else ""
        values[name] = number * 1024 if unit == "kb" else number
    return values


def read_numa_nodes(
    sysroot: SysRoot,
    online: Iterable[int],
    memory_total_bytes: int | None,
    memory_free_bytes: int | None,
) -> tuple[list[NumaNode], bool]:
    """(nodes, stated): stated is False where one node had to be assumed."""
    online_set = set(online)
    has_memory = sysroot.read_cpu_list(f"{NODE_DIR}/has_memory")
    has_normal = sysroot.read_cpu_list(f"{NODE_DIR}/has_normal_memory")
    initiators = set(sysroot.read_cpu_list(f"{NODE_DIR}/has_generic_initiator") or ())
    ids = numbered_entries(sysroot.listdir(NODE_DIR), "node")
    # A node directory the kernel's online mask leaves out is no node (hwloc's rule).
    online_nodes = set(sysroot.read_cpu_list(f"{NODE_DIR}/online") or ())
    ids = [node for node in ids if node in online_nodes] or ids
    dax_kinds = read_dax_kinds(sysroot)
    nodes = []
    for node_id in ids:
        base = f"{NODE_DIR}/node{node_id}"
        cpus = sysroot.read_cpu_list(f"{base}/cpulist")
        if cpus is None:
            cpus = sysroot.read_cpu_mask(f"{base}/cpumap") or ()
        meminfo = parse_meminfo(sysroot.read_text(f"{base}/meminfo"))
        node = NumaNode(
            id=node_id,
            cpus=format_cpu_list(cpu for cpu in cpus if cpu in online_set),
            memory_bytes=meminfo.get("MemTotal"),
            free_bytes=meminfo.get("MemFree"),
            has_memory=None if has_memory is None else node_id in has_memory,
            generic_initiator=node_id in initiators,
            distances=_distances(sysroot.read_line(f"{base}/distance"), ids),
            normal_memory=None if has_normal is None else node_id in has_normal,
            initiators=_initiators(sysroot, base),
        )
        nodes.append(dataclasses.replace(node, kind=node_kind(node, dax_kinds.get(node_id))))
    if nodes:
        return mark_overlaps(mark_duplicates(nodes)), True
    fallback = NumaNode(
        id=0,
        cpus=format_cpu_list(online),
        memory_bytes=memory_total_bytes,
        free_bytes=memory_free_bytes,
    )
    return [fallback], False


def _initiators(sysroot: SysRoot, base: str) -> tuple[int, ...]:
    """The nodes whose CPUs reach this node best: access1 (CPU initiators only, so a
    generic initiator's accelerator never stands in for CPUs), else access0."""
    for access in ("access1", "access0"):
        names = sysroot.listdir(f"{base}/{access}/initiators")
        if names:
            return tuple(numbered_entries(names, "node"))
    return ()


def read_dax_kinds(sysroot: SysRoot) -> dict[int, str]:
    """Node -> NVM or memory-only, for each node a kmem-onlined DAX device targets."""
    kinds: dict[int, str] = {}
    for device in sysroot.listdir(f"{DAX_DIR}/devices"):
        if not sysroot.exists(f"{DAX_DIR}/drivers/kmem/{device}"):
            continue  # a device DAX (a character device), not system memory
        node = sysroot.read_int(f"{DAX_DIR}/devices/{device}/target_node")
        if node is None or node < 0:
            continue
        parent = sysroot.read_link(f"{DAX_DIR}/devices/{device}") or ""
        kinds[node] = NVM if "ndbus" in parent else MEMORY_ONLY
    return kinds


def node_kind(node: NumaNode, dax_kind: str | None = None) -> str:
    """What the node is, from its CPUs, the kernel's node state masks and the DAX device
    that onlined it (`dax_kind`, where one did)."""
    if node.generic_initiator and not node.cpus:
        return GENERIC_INITIATOR
    memory = node.holds_memory() or (node.has_memory is None and node.memory_bytes is None)
    if node.cpus:
        return CPUS_AND_MEMORY if memory else CPUS_ONLY
    if not memory:
        return EMPTY
    if dax_kind is not None:
        return dax_kind
    if node.has_memory is None and node.memory_bytes is None:
        return NO_CPUS_MEMORY_UNSTATED
    # Memory the kernel keeps out of its normal zones (ZONE_MOVABLE only) on a node
    # without CPUs: a device's (a GPU's coherent memory, hot-plugged CXL or dax kmem).
    return DEVICE_MEMORY if node.normal_memory is False else MEMORY_ONLY


def mark_duplicates(nodes: list[NumaNode]) -> list[NumaNode]:
    """Nodes that repeat an earlier node's CPUs (and memory, where stated) exactly.

    A CPU belongs to one node, so two nodes listing the same CPUs with the same memory
    are one node listed twice (seen on firmware that repeats its only node).
    """
    first: dict[tuple[str, int | None], int] = {}
    marked = []
    for node in nodes:
        key = (node.cpus, node.memory_bytes)
        original = first.setdefault(key, node.id) if node.cpus else node.id
        if original != node.id:
            node = dataclasses.replace(node, duplicate_of=original)
        marked.append(node)
    return marked


def mark_overlaps(nodes: list[NumaNode]) -> list[NumaNode]:
    """Nodes naming CPUs an earlier node already names, without repeating it exactly.

    hwloc ignores a node whose CPUs intersect the earlier nodes' (a buggy BIOS: Linux
    puts each CPU in one node); the node's memory is still real, so it is kept as
    overlapping the first earlier node it shares CPUs with.
    """
    owner: dict[int, int] = {}
    marked = []
    for node in nodes:
        cpus = parse_cpu_list(node.cpus)
        shared = [owner[cpu] for cpu in cpus if cpu in owner]
        if node.duplicate_of is None and shared:
            node = dataclasses.replace(node, overlaps=min(shared))
        elif node.duplicate_of is None:
            for cpu in cpus:
                owner[cpu] = node.id
        marked.append(node)
    return marked


def count_nodes(
    nodes: list[NumaNode], stated: bool, memory_allowed: frozenset[int] | None = None
) -> tuple[int, str]:
    """(how many nodes hold CPUs or usable memory, how that was counted).

    `memory_allowed`: the nodes cpuset.mems allows, where the cgroup states them; then
    only those count (hwloc's default view: a node is its memory).
    """
    if not stated:
        return 1, "no NUMA data: one node assumed"
    counted = [n for n in nodes if counts(n, memory_allowed)]
    left_out: dict[str, list[int]] = {}
    for node in nodes:
        if node.duplicate_of is not None:
            left_out.setdefault("duplicates of earlier nodes", []).append(node.id)
        elif node.overlaps is not None:
            left_out.setdefault("CPUs of earlier nodes listed again", []).append(node.id)
        elif memory_allowed is not None and node.id not in memory_allowed:
            left_out.setdefault("memory outside cpuset.mems", []).append(node.id)
        elif not counts(node, memory_allowed):
            left_out.setdefault(_NOT_COUNTED.get(node.kind, node.kind), []).append(node.id)
    basis = "nodes holding CPUs or memory"
    if memory_allowed is not None:
        basis = "nodes whose memory cpuset.mems allows"
    if left_out:
        parts = [f"{what} {format_cpu_list(ids)}" for what, ids in left_out.items()]
        basis += f" ({len(nodes)} in view; not counted: " + "; ".join(parts) + ")"
    return len(counted), basis


def counts(node: NumaNode, memory_allowed: frozenset[int] | None = None) -> bool:
    """Whether a node counts: not a repeat, its memory allowed where cpuset.mems is
    stated, and holding allowed CPUs or, without CPUs, memory the kernel states.

    A CPU-less node that states nothing (no mask, no meminfo: a GPU's node in a dump
    that kept only cpumaps) is not known to hold usable memory, so it is not counted.
    """
    if node.duplicate_of is not None or node.overlaps is not None:
        return False
    if memory_allowed is not None and node.id not in memory_allowed:
        return False
    if node.cpus:
        return True
    stated = node.has_memory is True or bool(node.memory_bytes)
    return stated and node.is_home()


_NOT_COUNTED = {
    DEVICE_MEMORY: "device memory",
    GENERIC_INITIATOR: "generic initiators without memory",
    EMPTY: "neither CPUs nor memory",
    CPUS_ONLY: "memoryless nodes outside the cpuset",
    NO_CPUS_MEMORY_UNSTATED: "no CPUs and no stated memory",
}


def _distances(line: str | None, ids: list[int]) -> dict[int, int]:
    """The node's `distance` row (one number per online node, in id order) by node id."""
    try:
        values = [int(word) for word in (line or "").split()]
    except ValueError:
        return {}
    if len(values) != len(ids):
        return {}
    return dict(zip(ids, values, strict=True))


def node_of_cpus(nodes: list[NumaNode]) -> dict[int, int]:
    """CPU → the node whose cpulist names it."""
    owner: dict[int, int] = {}
    for node in nodes:
        for cpu in parse_cpu_list(node.cpus):
            owner.setdefault(cpu, node.id)
    return owner
