"""NUMA nodes from /sys/devices/system/node, and the one-node fallback.

Node ids may be sparse (0, 2, 3), a node may hold memory and no CPUs, and a
node's cpulist is what the kernel states (on s390 it can name possible CPUs
that are not online). A machine or dump without a node directory is one node
holding every online CPU and all of /proc/meminfo.
"""

from __future__ import annotations

from collections.abc import Iterable

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.facts import NumaNode
from omni_cpu.hardware.sysroot import SysRoot, numbered_entries

NODE_DIR = "/sys/devices/system/node"


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
    nodes = []
    for node_id in numbered_entries(sysroot.listdir(NODE_DIR), "node"):
        base = f"{NODE_DIR}/node{node_id}"
        cpus = sysroot.read_cpu_list(f"{base}/cpulist")
        if cpus is None:
            cpus = sysroot.read_cpu_mask(f"{base}/cpumap") or ()
        meminfo = parse_meminfo(sysroot.read_text(f"{base}/meminfo"))
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=format_cpu_list(cpus),
                memory_bytes=meminfo.get("MemTotal"),
                free_bytes=meminfo.get("MemFree"),
            )
        )
    if nodes:
        return nodes, True
    fallback = NumaNode(
        id=0,
        cpus=format_cpu_list(online),
        memory_bytes=memory_total_bytes,
        free_bytes=memory_free_bytes,
    )
    return [fallback], False


def node_of_cpus(nodes: list[NumaNode]) -> dict[int, int]:
    """CPU → the node whose cpulist names it."""
    owner: dict[int, int] = {}
    for node in nodes:
        for cpu in parse_cpu_list(node.cpus):
            owner.setdefault(cpu, node.id)
    return owner
