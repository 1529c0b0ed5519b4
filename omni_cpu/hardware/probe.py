"""Read a machine (or its dump) into `Facts`: the one entry point of the probe.

Raw facts are read once through one `SysRoot`, then derived. Each part degrades
on its own: a dump without NUMA data still gets CPUs, one without topology
still gets NUMA nodes. Live-only facts (affinity, libnuma, uname) are read only
when the root is `/`.

The facts describe what this process may use, as hwloc does by default (the
rules are omni_cpu.hardware.allowed's). The whole machine stays in `Facts.host`.
"""

from __future__ import annotations

import dataclasses
import os

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.errors import SysrootError
from omni_cpu.hardware.allowed import (
    allowed_cpus,
    allowed_nodes,
    count_allowed_nodes,
    count_allowed_packages,
    listed_nodes,
)
from omni_cpu.hardware.arch import read_architecture
from omni_cpu.hardware.cpu import read_cpu_sets, read_topology
from omni_cpu.hardware.cpuinfo import CpuInfo, cpu_number, parse_cpuinfo
from omni_cpu.hardware.facts import Facts, Host, NumaNode
from omni_cpu.hardware.isa import isa_from_hwcaps, parse_auxv, read_isa
from omni_cpu.hardware.libnuma import read_libnuma
from omni_cpu.hardware.limits import read_limits
from omni_cpu.hardware.numa import count_nodes, node_of_cpus, parse_meminfo, read_numa_nodes
from omni_cpu.hardware.preload import find_preload_libraries
from omni_cpu.hardware.sysroot import SysRoot

# Present on every aarch64 Linux kernel: the architecture, where cpuinfo cannot say.
_AARCH64_MIDR = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"


def read_facts(root: str | os.PathLike[str] = "/") -> Facts:
    """Snapshot the machine at `root` ("/" = this machine, else a sysroot dump)."""
    sysroot = _open_sysroot(root)
    notes: list[str] = []
    cpuinfo_text = sysroot.read_text("/proc/cpuinfo")
    cpuinfo = parse_cpuinfo(cpuinfo_text)
    cpuinfo_readable = bool(cpuinfo.processors or cpuinfo.common)
    if not cpuinfo_readable:
        state = "missing" if cpuinfo_text is None else "unreadable"
        notes.append(f"/proc/cpuinfo is {state}: architecture and ISA from what else says")
    architecture = read_architecture(sysroot, cpuinfo)
    if architecture == "unknown" and sysroot.exists(_AARCH64_MIDR):
        architecture = "aarch64"
    cpu_sets = read_cpu_sets(sysroot, cpuinfo)
    limits = read_limits(sysroot)
    allowed = allowed_cpus(cpu_sets.online, limits)
    host_topology = read_topology(sysroot, cpuinfo, architecture, cpu_sets.online)
    topology = host_topology
    if allowed != cpu_sets.online:
        topology = read_topology(sysroot, cpuinfo, architecture, allowed)
    meminfo = parse_meminfo(sysroot.read_text("/proc/meminfo"))
    host_nodes, numa_stated = read_numa_nodes(
        sysroot, cpu_sets.online, meminfo.get("MemTotal"), meminfo.get("MemFree")
    )
    in_view = allowed_nodes(host_nodes, allowed, limits)
    node_count, node_basis = count_allowed_nodes(in_view, numa_stated, limits)
    sockets, sockets_source = count_allowed_packages(
        host_topology, allowed, host_nodes, in_view, numa_stated, limits
    )
    nodes = listed_nodes(in_view, limits)
    notes.extend(_duplicate_notes(nodes))
    # A CPU keeps the node the kernel puts it on, listed or not (outside cpuset.mems).
    owner = node_of_cpus(in_view)
    cpus = [dataclasses.replace(cpu, node=owner.get(cpu.cpu)) for cpu in topology.cpus]

    isa, isa_source = _read_isa(sysroot, cpuinfo, cpuinfo_readable, architecture, notes)
    if architecture == "unknown":
        notes.append("architecture unknown: nothing in the dump names it")
    if sysroot.is_live:
        isa, isa_source = _check_with_cpuid(isa, isa_source, architecture, notes)

    libnuma = None
    if sysroot.is_live:
        limits = dataclasses.replace(limits, affinity_cpus=_affinity())
        libnuma = read_libnuma(nodes)

    return Facts(
        source="live" if sysroot.is_live else os.fspath(root),
        architecture=architecture,
        vendor=topology.vendor,
        model_names=[t.model_name for t in topology.core_types],
        possible_cpus=format_cpu_list(cpu_sets.possible),
        online_cpus=format_cpu_list(allowed),
        offline_cpus=format_cpu_list(cpu_sets.offline),
        sockets=sockets,
        sockets_source=sockets_source,
        sockets_by_core_type=topology.sockets_by_core_type,
        cores_per_socket=topology.cores_per_socket,
        threads_per_core=topology.threads_per_core,
        core_types=topology.core_types,
        cpus=cpus,
        numa_nodes=nodes,
        numa_stated=numa_stated,
        isa=isa,
        isa_source=isa_source,
        memory_total_bytes=meminfo.get("MemTotal"),
        memory_available_bytes=meminfo.get("MemAvailable"),
        limits=limits,
        libnuma=libnuma,
        notes=notes,
        preload_libraries=_preload_libraries(sysroot),
        numa_node_count=node_count,
        numa_count_basis=node_basis,
        host=_host(cpu_sets.online, host_topology.sockets, count_nodes(host_nodes, numa_stated)[0]),
        **_x86_identity(cpuinfo, architecture),
    )


def _host(online: tuple[int, ...], sockets: int | None, numa_node_count: int) -> Host:
    """The whole host, beside the part of it this process is allowed."""
    return Host(
        online_cpus=format_cpu_list(online),
        cpu_count=len(online),
        sockets=sockets,
        numa_node_count=numa_node_count,
    )


def _open_sysroot(root: str | os.PathLike[str]) -> SysRoot:
    """The root to read, refused in one line where it holds no dump."""
    sysroot = SysRoot(root)
    if not sysroot.is_dir("/"):
        raise SysrootError(f"sysroot {os.fspath(root)!r} is not a directory", "pass a dump folder")
    if not sysroot.exists("/proc") and not sysroot.exists("/sys"):
        raise SysrootError(
            f"sysroot {os.fspath(root)!r} has neither proc/ nor sys/",
            "pass the folder that holds the dump's proc/ and sys/",
        )
    return sysroot


def _read_isa(
    sysroot: SysRoot, cpuinfo: CpuInfo, cpuinfo_readable: bool, architecture: str, notes: list[str]
) -> tuple[list[str], str | None]:
    """The ISA and where it was read: cpuinfo's flags, else the hwcaps (auxv), else unknown."""
    if cpuinfo_readable:
        return read_isa(cpuinfo, architecture), "cpuinfo"
    from_hwcaps = isa_from_hwcaps(parse_auxv(sysroot.read_bytes("/proc/self/auxv")), architecture)
    if from_hwcaps is not None:
        return from_hwcaps, "hwcap"
    notes.append("ISA unknown (no cpuinfo flags, no hwcaps): dtype cannot be chosen from it")
    return [], None


def _x86_identity(cpuinfo: CpuInfo, architecture: str) -> dict[str, int | None]:
    """cpuinfo's `cpu family` and `model` on x86 (elsewhere `model` means something else)."""
    if architecture not in ("x86_64", "i686", "i386"):
        return {}
    return {
        "cpu_family": cpu_number(cpuinfo, "cpu family"),
        "cpu_model": cpu_number(cpuinfo, "model"),
    }


def _duplicate_notes(nodes: list[NumaNode]) -> list[str]:
    repeats: dict[int, list[int]] = {}
    for node in nodes:
        if node.duplicate_of is not None:
            repeats.setdefault(node.duplicate_of, []).append(node.id)
    notes = [
        f"NUMA nodes {format_cpu_list(ids)} repeat node {first}'s CPUs and memory "
        f"(firmware lists one node {len(ids) + 1} times): merged into node {first}"
        for first, ids in repeats.items()
    ]
    overlapping: dict[int, list[int]] = {}
    for node in nodes:
        if node.overlaps is not None:
            overlapping.setdefault(node.overlaps, []).append(node.id)
    notes.extend(
        f"NUMA nodes {format_cpu_list(ids)} list CPUs node {first} already holds (buggy "
        f"firmware NUMA table): read as one node, node {first}, as hwloc does; their "
        f"memory is counted as node {first}'s"
        for first, ids in overlapping.items()
    )
    return notes


def _check_with_cpuid(
    isa: list[str], isa_source: str | None, architecture: str, notes: list[str]
) -> tuple[list[str], str | None]:
    """Live x86 only: the kernel's flags against CPUID's (py-cpuinfo, a few ms)."""
    from omni_cpu.hardware.cpuid import cross_check, read_cpuid_flags

    flags = read_cpuid_flags(architecture)
    if flags is None:
        return isa, isa_source
    if isa_source is None:
        notes.append("ISA from CPUID: /proc/cpuinfo states no flags")
        return sorted(flags), "cpuid"
    checked, note = cross_check(isa, flags)
    if note:
        notes.append(note)
    return checked, isa_source


def _preload_libraries(sysroot: SysRoot) -> list[str]:
    """Preload candidates as paths on the probed machine (a dump's are under its root)."""
    if sysroot.is_live:
        return list(find_preload_libraries("/"))
    found = find_preload_libraries(sysroot.root)
    return ["/" + os.path.relpath(path, sysroot.root) for path in found]


def _affinity() -> str | None:
    try:
        return format_cpu_list(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
