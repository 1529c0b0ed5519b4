"""libnuma through ctypes, on the live machine only, cross-checked with sysfs.

No libnuma is a normal case (containers, minimal images): the result then says
`available=False` and why. Node sizes from libnuma and from the nodes' sysfs
meminfo should agree; they can differ by what the kernel reserves after boot,
hence a tolerance.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

from omni_cpu.hardware.facts import Libnuma, NumaNode

LIBRARY_NAMES = ("libnuma.so.1", "libnuma.so")

# Sizes agree when within 2 % or 64 MiB, whichever is larger: both read the
# same zone counters, at slightly different times and roundings.
AGREE_FRACTION = 0.02
AGREE_BYTES = 64 << 20


def read_libnuma(nodes: Iterable[NumaNode]) -> Libnuma:
    """numa_available / numa_max_node / numa_node_size64, compared with sysfs nodes."""
    library = _load()
    if library is None:
        return Libnuma(available=False, note="libnuma not found")
    try:
        library.numa_available.restype = ctypes.c_int
        if library.numa_available() < 0:
            return Libnuma(available=False, note="numa_available() < 0: no NUMA support")
        library.numa_max_node.restype = ctypes.c_int
        max_node = int(library.numa_max_node())
        library.numa_node_size64.restype = ctypes.c_longlong
        library.numa_node_size64.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
        sizes: dict[int, int] = {}
        for node in range(max_node + 1):
            free = ctypes.c_longlong(0)
            size = int(library.numa_node_size64(node, ctypes.byref(free)))
            if size >= 0:  # -1: no such node (sparse ids)
                sizes[node] = size
    except (AttributeError, OSError) as error:
        return Libnuma(available=False, note=f"libnuma unusable: {error}")
    agrees, note = _compare(sizes, list(nodes))
    return Libnuma(
        available=True,
        max_node=max_node,
        node_memory_bytes=sizes,
        agrees_with_sysfs=agrees,
        note=note,
    )


def _load() -> ctypes.CDLL | None:
    for name in LIBRARY_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _compare(sizes: dict[int, int], nodes: list[NumaNode]) -> tuple[bool | None, str | None]:
    sysfs = {n.id: n.memory_bytes for n in nodes if n.memory_bytes is not None}
    if not sysfs:
        return None, "sysfs states no node memory to compare"
    if set(sizes) != set(sysfs):
        return False, f"nodes differ: libnuma {sorted(sizes)}, sysfs {sorted(sysfs)}"
    for node, size in sizes.items():
        expected = sysfs[node]
        if abs(size - expected) > max(AGREE_BYTES, AGREE_FRACTION * expected):
            return False, f"node {node}: libnuma {size} bytes, sysfs {expected} bytes"
    return True, None
