"""NUMA nodes from /sys/devices/system/node, and the one-node fallback.

Node ids may be sparse (0, 2, 3). A node may hold memory and no CPUs (CXL, HBM,
GPU memory), CPUs and no memory (memoryless), or be a generic initiator; the
kernel's has_memory / has_generic_initiator masks say which, and each node's
`distance` row says how far the others are. A node's cpulist can name CPUs that
are not online (s390, hot-unplugged CPUs): only online CPUs are kept. A machine
or dump without a node directory is one node holding every online CPU and all
of /proc/meminfo.
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
    online_set = set(online)
    has_memory = sysroot.read_cpu_list(f"{NODE_DIR}/has_memory")
    initiators = set(sysroot.read_cpu_list(f"{NODE_DIR}/has_generic_initiator") or ())
    ids = numbered_entries(sysroot.listdir(NODE_DIR), "node")
    nodes = []
    for node_id in ids:
        base = f"{NODE_DIR}/node{node_id}"
        cpus = sysroot.read_cpu_list(f"{base}/cpulist")
        if cpus is None:
            cpus = sysroot.read_cpu_mask(f"{base}/cpumap") or ()
        meminfo = parse_meminfo(sysroot.read_text(f"{base}/meminfo"))
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=format_cpu_list(cpu for cpu in cpus if cpu in online_set),
                memory_bytes=meminfo.get("MemTotal"),
                free_bytes=meminfo.get("MemFree"),
                has_memory=None if has_memory is None else node_id in has_memory,
                generic_initiator=node_id in initiators,
                distances=_distances(sysroot.read_line(f"{base}/distance"), ids),
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
