"""Logical CPUs, core types and topology counts, as lscpu derives them.

Counts come from the sysfs sibling lists of the online CPUs of each core type:
cores are the distinct thread-sibling sets, sockets the distinct core-sibling
(package) sets, threads per core the size of the thread-sibling sets (a list
of the distinct sizes where cores differ, e.g. SMT off on some cores); s390
states cores per socket in /proc/sysinfo instead. Where a kernel does not
describe sockets (aarch64 without an ACPI PPTT table, on kernels that predate
`cluster_id`, calls its clusters packages) sockets is None. s390 states books and
drawers above its packages, mostly with package ids of -1: its packages are its
core sibling groups, as hwloc counts them (lscpu prints them per book). A kernel
that states clusters apart from packages means its packages (`package_cpus_list`,
`physical_package_id`), PPTT or not. Where no package sibling list is given (old
kernels) or every one is empty, the package ids group the CPUs. CPUs that
/proc/cpuinfo leaves out (LXCFS lists a container's CPUs only) are of the first
listed CPU's type.

Sockets are counted once over every CPU, not per core type, as hwloc counts
packages: the distinct package sibling sets (`package_cpus`, else `core_siblings`,
which the kernel documents as the CPUs of one package; an id can repeat across
packages, as IA-64's does), and only where no CPU states a set the distinct
`physical_package_id`s. Where no CPU states either, no package is counted (0), as
hwloc counts none. A hybrid machine's per-type counts (lscpu's per-type lines)
are kept beside it. A CPU without a thread-sibling list is a core of its own
(or of its package's `core_id`), so cores per socket is never 0 where CPUs exist.
`Topology.sockets_source` says which of these the count came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware import arm_ids
from omni_cpu.hardware.cpuinfo import CpuInfo
from omni_cpu.hardware.facts import CoreType, LogicalCpu
from omni_cpu.hardware.sysroot import SysRoot, numbered_entries

CPU_DIR = "/sys/devices/system/cpu"

# Intel hybrid parts expose one perf PMU per core kind, each with its CPU list.
_INTEL_HYBRID_PMUS = (("cpu_core", "performance"), ("cpu_atom", "efficiency"))

_SYSINFO_SW_TOPOLOGY = re.compile(
    r"^CPU Topology SW:\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"
)


@dataclass(frozen=True)
class CpuSets:
    """The kernel's CPU masks; `offline` is present but not online (lscpu's rule)."""

    possible: tuple[int, ...]
    present: tuple[int, ...]
    online: tuple[int, ...]

    @property
    def offline(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.present) - set(self.online)))


@dataclass(frozen=True)
class _Sibling:
    """One online CPU's raw topology attributes."""

    cpu: int
    core_id: int | None
    package_id: int | None
    die_id: int | None
    cluster_id: int | None
    threads: frozenset[int] | None
    package: frozenset[int] | None
    capacity: int | None


@dataclass(frozen=True)
class Topology:
    vendor: str | None
    cpus: list[LogicalCpu]
    core_types: list[CoreType]
    sockets: int | None
    sockets_by_core_type: list[int | None] | None
    cores_per_socket: int | list[int | None] | None
    threads_per_core: Any
    # Where `sockets` came from (probe --json's `sockets_source`).
    sockets_source: str = ""
    # CPU -> its package (a sibling set or an id), where the kernel states one.
    package_of: dict[int, object] = field(default_factory=dict)


def read_cpu_sets(sysroot: SysRoot, cpuinfo: CpuInfo) -> CpuSets:
    """possible/present/online CPUs, with fallbacks for dumps that lack the masks."""
    dirs = tuple(numbered_entries(sysroot.listdir(CPU_DIR), "cpu"))
    online = sysroot.read_cpu_list(f"{CPU_DIR}/online") or None  # an empty mask states nothing
    if online is None:
        # Each cpuN/online says 0 or 1; cpu0 often has no such file (not hotpluggable).
        online = tuple(c for c in dirs if sysroot.read_int(f"{CPU_DIR}/cpu{c}/online") != 0)
    elif dirs:
        # The kernel gives every online CPU its directory: a CPU the mask names without
        # one is not in this (trimmed) dump, and nothing about it can be read (hwloc's rule).
        online = tuple(cpu for cpu in online if cpu in set(dirs)) or online
    if not online:
        online = tuple(sorted(cpuinfo.processors))
    if not online and sysroot.is_live:
        import os

        online = tuple(sorted(os.sched_getaffinity(0)))
    present = sysroot.read_cpu_list(f"{CPU_DIR}/present")
    possible = sysroot.read_cpu_list(f"{CPU_DIR}/possible")
    if possible is None:
        possible = tuple(sorted(set(dirs) | set(online) | set(present or ())))
    if present is None:
        present = possible
    return CpuSets(possible=possible, present=present, online=online)


def read_topology(
    sysroot: SysRoot, cpuinfo: CpuInfo, architecture: str, online: Iterable[int]
) -> Topology:
    """Per-CPU facts, core types and lscpu's socket/core/thread counts."""
    siblings = [_read_siblings(sysroot, cpu) for cpu in online]
    groups = _group_by_core_type(sysroot, cpuinfo, architecture, siblings)
    max_thread_id = _int_or_none(cpuinfo.first("max thread id"))
    sw_cores_per_socket = _sysinfo_cores_per_socket(sysroot)
    states_clusters = any(
        sysroot.exists(f"{CPU_DIR}/cpu{s.cpu}/topology/cluster_id") for s in siblings[:1]
    )
    sockets_unstated = (
        architecture == "aarch64"
        and not sysroot.exists("/sys/firmware/acpi/tables/PPTT")
        and not states_clusters
    )

    core_types: list[CoreType] = []
    type_of_cpu: dict[int, int] = {}
    for index, (model_name, kind, members) in enumerate(groups):
        counts = _count(members, max_thread_id, sw_cores_per_socket, sockets_unstated)
        capacities = [m.capacity for m in members if m.capacity is not None]
        core_types.append(
            CoreType(
                model_name=model_name,
                cpus=format_cpu_list(m.cpu for m in members),
                sockets=counts[0],
                cores_per_socket=counts[1],
                threads_per_core=counts[2],
                capacity=max(capacities) if capacities else None,
                kind=kind,
            )
        )
        for member in members:
            type_of_cpu[member.cpu] = index

    cpus = [
        LogicalCpu(
            cpu=s.cpu,
            online=True,
            core_id=s.core_id,
            package_id=s.package_id,
            die_id=s.die_id,
            cluster_id=s.cluster_id,
            thread_siblings=format_cpu_list(s.threads) if s.threads else str(s.cpu),
            core_type=type_of_cpu.get(s.cpu, 0),
        )
        for s in siblings
    ]
    per_type = [t.sockets for t in core_types]
    package_of, basis = package_keys(siblings)
    if sockets_unstated:
        sockets, source = None, "unstated: aarch64 without ACPI PPTT calls clusters packages"
    elif not package_of:
        sockets, source = 0, "no package sibling list or id on any CPU: no package counted"
    else:
        sockets, source = len(set(package_of.values())), basis
    return Topology(
        vendor=_vendor(cpuinfo),
        cpus=cpus,
        core_types=core_types,
        sockets=sockets,
        sockets_by_core_type=per_type if len(per_type) > 1 else None,
        cores_per_socket=_collapse([t.cores_per_socket for t in core_types]),
        threads_per_core=_collapse([t.threads_per_core for t in core_types]),
        sockets_source=source,
        package_of=package_of,
    )


# -- reading ---------------------------------------------------------------------


def _read_siblings(sysroot: SysRoot, cpu: int) -> _Sibling:
    base = f"{CPU_DIR}/cpu{cpu}/topology"

    def ident(name: str) -> int | None:
        value = sysroot.read_int(f"{base}/{name}")
        # -1 is "not known"; x86 writes 65535 (BAD_APICID) for a missing cluster.
        return None if value is None or value < 0 or value == 0xFFFF else value

    def cpu_set(*names: str) -> frozenset[int] | None:
        # Newer kernels add core_cpus/package_cpus beside the old names; the
        # _list files are text, the plain ones hex masks.
        for name in names:
            cpus = sysroot.read_cpu_list(f"{base}/{name}_list")
            if cpus is None:
                cpus = sysroot.read_cpu_mask(f"{base}/{name}")
            if cpus:
                return frozenset(cpus)
        return None

    return _Sibling(
        cpu=cpu,
        core_id=ident("core_id"),
        package_id=ident("physical_package_id"),
        die_id=ident("die_id"),
        cluster_id=ident("cluster_id"),
        threads=cpu_set("thread_siblings", "core_cpus"),
        package=cpu_set("package_cpus", "core_siblings"),
        capacity=sysroot.read_int(f"{CPU_DIR}/cpu{cpu}/cpu_capacity"),
    )


def _sysinfo_cores_per_socket(sysroot: SysRoot) -> int | None:
    """s390: the hypervisor states cores per socket; sysfs masks are virtual there."""
    text = sysroot.read_text("/proc/sysinfo")
    if not text:
        return None
    for line in text.splitlines():
        match = _SYSINFO_SW_TOPOLOGY.match(line)
        if match:
            return int(match.group(6))
    return None


def _vendor(cpuinfo: CpuInfo) -> str | None:
    vendor = cpuinfo.first("vendor_id") or cpuinfo.first("vendor")
    if vendor:
        return vendor
    implementer = arm_ids.parse_id(cpuinfo.first("cpu implementer"))
    if implementer is not None:
        return arm_ids.implementer_name(implementer) or f"{implementer:#x}"
    return cpuinfo.first("mvendorid")  # RISC-V: the JEDEC id, as lscpu prints it


# -- core types ------------------------------------------------------------------


def _group_by_core_type(
    sysroot: SysRoot, cpuinfo: CpuInfo, architecture: str, siblings: list[_Sibling]
) -> list[tuple[str, str | None, list[_Sibling]]]:
    """[(model name, kind, member CPUs)] in lscpu's order (LITTLE before big)."""
    if not siblings:
        return []
    hybrid = _intel_hybrid_kinds(sysroot)
    keyed: dict[tuple, list[_Sibling]] = {}
    names: dict[tuple, tuple[str, str | None]] = {}
    for sibling in siblings:
        key, name, kind = _core_type_of(cpuinfo, architecture, hybrid, sibling)
        keyed.setdefault(key, []).append(sibling)
        names.setdefault(key, (name, kind))
    # Smallest cores first, then the key's rank; the sort is stable, so types
    # of equal rank keep the order of their first CPU.
    ordered = sorted(keyed, key=lambda k: (_min_capacity(keyed[k]), k[0]))
    return [(names[k][0], names[k][1], keyed[k]) for k in ordered]


def _intel_hybrid_kinds(sysroot: SysRoot) -> dict[int, tuple[int, str]]:
    """CPU → (order, kind) on Intel hybrid parts; empty on uniform machines."""
    kinds: dict[int, tuple[int, str]] = {}
    for order, (pmu, kind) in enumerate(_INTEL_HYBRID_PMUS):
        for cpu in sysroot.read_cpu_list(f"/sys/devices/{pmu}/cpus") or ():
            kinds[cpu] = (order, kind)
    return kinds if len({kind for _, kind in kinds.values()}) > 1 else {}


def _core_type_of(
    cpuinfo: CpuInfo,
    architecture: str,
    hybrid: dict[int, tuple[int, str]],
    sibling: _Sibling,
) -> tuple[tuple, str, str | None]:
    """((rank, identity), model name, kind) of one CPU's core type."""
    cpu = sibling.cpu
    if cpu in hybrid:
        order, kind = hybrid[cpu]
        return ((order,), kind), _model_name(cpuinfo, cpu), kind
    if cpuinfo.processors and cpu not in cpuinfo.processors:
        # A cpuinfo that lists fewer CPUs than sysfs (LXCFS shows a container's CPUs,
        # renumbered): CPUs it leaves out are of the first listed CPU's type, not a
        # type of their own.
        cpu = min(cpuinfo.processors)
    if architecture.startswith(("arm", "aarch64")):
        # lscpu lists ARM types by implementer and part number.
        implementer = arm_ids.parse_id(cpuinfo.get(cpu, "cpu implementer"))
        part = arm_ids.parse_id(cpuinfo.get(cpu, "cpu part"))
        name = arm_ids.part_name(implementer, part) or _model_name(cpuinfo, cpu)
        rank = (implementer or 0, part or 0)
        return (rank, rank), name, None
    # Elsewhere one type per distinct model name (uniform machines: one type).
    name = _model_name(cpuinfo, cpu)
    return ((), name), name, None


def _model_name(cpuinfo: CpuInfo, cpu: int) -> str:
    # x86/loongarch "model name", ppc/sparc "cpu", RISC-V "uarch"; "-" as lscpu prints.
    for key in ("model name", "cpu", "uarch"):
        value = cpuinfo.get(cpu, key)
        if value:
            return value
    return "-"


def _min_capacity(members: list[_Sibling]) -> int:
    capacities = [m.capacity for m in members if m.capacity is not None]
    return min(capacities) if capacities else 0


# -- counting --------------------------------------------------------------------


def _count(
    members: list[_Sibling],
    max_thread_id: int | None,
    sw_cores_per_socket: int | None,
    sockets_unstated: bool,
) -> tuple[int | None, int | None, int | list[int] | None]:
    """(sockets, cores per socket, threads per core) of one core type, lscpu's way."""
    cores = {_core_of(m) for m in members}
    packages = {m.package for m in members if m.package}
    if not packages:
        # No package sibling lists (old kernels, empty masks): the package ids group
        # the CPUs, where the kernel states them.
        by_id: dict[int, set[int]] = {}
        for m in members:
            if m.package_id is not None:
                by_id.setdefault(m.package_id, set()).add(m.cpu)
        packages = {frozenset(cpus) for cpus in by_id.values()}
    if not any(m.threads for m in members) and not packages:
        return None, None, None
    sizes = sorted({len(m.threads) for m in members if m.threads}) or [1]
    threads: int | list[int] = sizes[0] if len(sizes) == 1 else sizes
    if max_thread_id is not None:
        threads = max_thread_id + 1  # s390 states its SMT width
    if sw_cores_per_socket is not None:
        cores_per_socket: int | None = sw_cores_per_socket
    else:
        cores_per_socket = max(1, len(cores) // len(packages)) if packages else None
    # DT-based aarch64 calls clusters packages.
    sockets = None if sockets_unstated or not packages else len(packages)
    return sockets, cores_per_socket, threads


def _package_of(member: _Sibling) -> object:
    """A CPU's package: its id where the kernel states one, else its core_siblings set."""
    if member.package_id is not None:
        return ("id", member.package_id)
    return ("set", member.package) if member.package else None


def package_keys(members: list[_Sibling]) -> tuple[dict[int, object], str]:
    """(CPU -> its package, how packages were told apart), for the CPUs that state one.

    Sibling sets where every CPU states one (hwloc's packages: an id may repeat across
    packages), ids where every CPU states one, else each CPU by what it states. Sets
    are taken among these CPUs only, so an offline sibling cannot split a package; as
    in hwloc, a package is the set its first CPU states, and a CPU whose own list
    disagrees (a dump whose lists conflict) belongs to the package that holds it.
    """
    cpus = frozenset(m.cpu for m in members)
    if members and all(m.package for m in members):
        stated = {m.cpu: m.package & cpus for m in members}
        made = [siblings for cpu, siblings in stated.items() if siblings and min(siblings) == cpu]
        keys: dict[int, object] = {
            cpu: ("set", next((p for p in made if cpu in p), siblings))
            for cpu, siblings in stated.items()
        }
        return keys, "package sibling lists (package_cpus / core_siblings)"
    if members and all(m.package_id is not None for m in members):
        keys = {m.cpu: ("id", m.package_id) for m in members}
        return keys, "package ids (physical_package_id): no CPU states a sibling list"
    keys = {m.cpu: key for m in members if (key := _package_of(m)) is not None}
    return keys, "package ids, and sibling lists where a CPU states no id"


def _core_of(member: _Sibling) -> object:
    """A CPU's core: its thread siblings, else (package, core_id), else the CPU itself."""
    if member.threads:
        return member.threads
    if member.core_id is not None:
        return ("core", _package_of(member), member.core_id)
    return ("cpu", member.cpu)


def _collapse(values: list) -> Any:
    """One value on uniform machines, a list (one per core type) on hybrid ones."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return values


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
