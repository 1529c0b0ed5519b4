"""The machine as a frozen, JSON-serializable snapshot.

Facts know nothing of models or plans. They are read once (see
`omni_cpu.hardware.probe.read_facts`) from a root that can be swapped, so any
machine's sysfs/procfs dump reads as if it were this one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omni_cpu.cpulist import parse_cpu_list

# 2: nodes state has_memory / generic initiators / distances, limits carry cpuset.mems,
# threads_per_core may list the distinct counts of one core type, facts carry notes
# and the preload libraries found.
# 3: CPUs, sockets and nodes are those the cgroup's cpuset allows (the whole machine
# under `host`), nodes carry their kind and duplicates, sockets is one integer (the
# per-core-type counts in `sockets_by_core_type`), `numa_node_count` says how it counted.
# 4: `sockets_source` says where `sockets` came from; nodes outside cpuset.mems are
# not counted (nor listed); nodes may be of kind NVM and may overlap an earlier node.
# Older dicts still load (new fields default).
SCHEMA_VERSION = 4

# What a NUMA node is, from the kernel's node state masks (Documentation/ABI/stable/
# sysfs-devices-node): has_cpu, has_memory, has_normal_memory, has_generic_initiator.
CPUS_AND_MEMORY = "CPUs and memory"
NVM = "NVM"  # CPU-less persistent memory a kmem DAX device onlines (hwloc: DAXType NVM)
CPUS_ONLY = "CPUs only"  # memoryless: its CPUs allocate from the nearest node with memory
MEMORY_ONLY = "memory only"  # CXL, HBM or far memory in the kernel's normal zones
DEVICE_MEMORY = "device memory"  # memory only in ZONE_MOVABLE (a GPU's, hot-plugged)
GENERIC_INITIATOR = "generic initiator"  # an accelerator's node: no CPUs of its own
EMPTY = "empty"  # neither CPUs nor memory (all its CPUs offline)
NO_CPUS_MEMORY_UNSTATED = "no CPUs, memory not stated"  # a dump without masks or meminfo

# The files of the libraries worth preloading into stage processes, by the names a profile's
# `preload:` gives them (hardware.preload finds them; the plan names what it found).
INTEL_OPENMP = ("libiomp5.so",)
TCMALLOC = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")


@dataclass(frozen=True)
class LogicalCpu:
    """One logical CPU as sysfs describes it (None where the kernel does not say)."""

    cpu: int
    online: bool
    core_id: int | None = None
    package_id: int | None = None
    die_id: int | None = None
    cluster_id: int | None = None
    node: int | None = None  # the kernel's node for it, listed in numa_nodes or not
    # Thread siblings (this CPU included), kernel list syntax.
    thread_siblings: str = ""
    # Index into Facts.core_types (hybrid / big.LITTLE); 0 on uniform machines.
    core_type: int = 0


@dataclass(frozen=True)
class CoreType:
    """A kind of core: all of a uniform machine, or one class of a hybrid one."""

    model_name: str
    cpus: str  # kernel list syntax
    sockets: int | None
    cores_per_socket: int | None
    # One number, or the distinct counts (ascending) where cores of this type differ
    # (some siblings offline, SMT enabled per core).
    threads_per_core: int | list[int] | None
    # Relative single-thread capacity where the kernel states it (cpu_capacity,
    # 1024 = biggest core); None elsewhere.
    capacity: int | None = None
    # "performance" / "efficiency" on Intel hybrid parts (cpu_core / cpu_atom);
    # None where the kernel does not name the kind.
    kind: str | None = None


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: str  # online CPUs, kernel list syntax; "" for a memory-only node
    memory_bytes: int | None  # MemTotal of the node
    free_bytes: int | None = None  # MemFree of the node
    # The kernel's node state masks (has_memory, has_generic_initiator); None where
    # the dump has no mask. A node without memory is a CPU-only (memoryless) node.
    has_memory: bool | None = None
    generic_initiator: bool = False
    # The node's row of the SLIT distance table: node id -> distance (10 = local).
    distances: dict[int, int] = field(default_factory=dict)
    # has_normal_memory where the dump states it: False on a node whose memory is all
    # ZONE_MOVABLE (device memory: a GPU's, hot-plugged CXL); None where unstated.
    normal_memory: bool | None = None
    # One of the kinds above (CPUS_AND_MEMORY, ...), derived from the masks and files.
    kind: str = CPUS_AND_MEMORY
    # The nodes whose CPUs reach this node's memory best (HMAT: access1/initiators, the
    # best CPU initiators, else access0/initiators); () where unstated.
    initiators: tuple[int, ...] = ()
    # The earlier node this one repeats exactly (same CPUs, same memory): firmware
    # that lists one node several times. Such a node is no home and is not counted.
    duplicate_of: int | None = None
    # The earlier node whose CPUs this one lists again, with memory of its own (buggy
    # firmware whose every node names every CPU): hwloc drops such a node; its memory is
    # real, and is counted as part of that earlier node's.
    overlaps: int | None = None

    def holds_memory(self) -> bool:
        """Whether allocations can land here: the mask where stated, else MemTotal."""
        if self.has_memory is not None:
            return self.has_memory
        return bool(self.memory_bytes)

    def is_home(self) -> bool:
        """Whether a replica's memory may live here: memory in the normal zones, no repeat."""
        if self.duplicate_of is not None or self.kind in (CPUS_ONLY, DEVICE_MEMORY, EMPTY):
            return False
        # A generic initiator's node is a home only for memory it states it holds.
        return self.kind != GENERIC_INITIATOR or self.holds_memory()

    def distance_to(self, other: int) -> int:
        """SLIT distance; without a table, 10 to itself and 20 to any other node."""
        if other in self.distances:
            return self.distances[other]
        return 10 if other == self.id else 20


@dataclass(frozen=True)
class Limits:
    """What binds this process beyond the hardware (containers, affinity)."""

    cgroup_version: int | None = None  # 1, 2 or None (no cgroup fs readable)
    cpuset_cpus: str | None = None  # effective cpuset, kernel list syntax
    cpuset_mems: str | None = None  # effective cpuset.mems: nodes memory may come from
    cpu_quota_cores: float | None = None  # cpu.max / cfs quota as cores
    memory_max_bytes: int | None = None  # memory.max / v1 limit; None = unlimited
    affinity_cpus: str | None = None  # os.sched_getaffinity, live machine only


@dataclass(frozen=True)
class Host:
    """The whole machine, where the facts above describe what this process may use."""

    online_cpus: str
    cpu_count: int
    sockets: int | None
    numa_node_count: int

    def describe(self) -> str:
        sockets = "? sockets" if self.sockets is None else _plural(self.sockets, "socket")
        return (
            f"{_plural(self.cpu_count, 'CPU')} ({self.online_cpus}), {sockets}, "
            f"{_plural(self.numa_node_count, 'node')}"
        )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass(frozen=True)
class Libnuma:
    """libnuma read through ctypes on the live machine, cross-checked with sysfs."""

    available: bool
    max_node: int | None = None
    node_memory_bytes: dict[int, int] = field(default_factory=dict)
    agrees_with_sysfs: bool | None = None
    note: str | None = None


@dataclass(frozen=True)
class Facts:
    """Everything the planner may use about a machine."""

    source: str  # "live" or the sysroot path
    architecture: str  # uname -m style: x86_64, aarch64, ppc64le, s390x, ...
    vendor: str | None
    model_names: list[str]  # one per core type
    possible_cpus: str
    online_cpus: str
    offline_cpus: str
    # cores_per_socket / threads_per_core: plain numbers on uniform machines, lists (one
    # per core type) on hybrid ones, as lscpu prints them. sockets is one number (the
    # per-type counts are in sockets_by_core_type); None where the kernel does not say.
    sockets: int | None
    cores_per_socket: int | list[int | None] | None
    threads_per_core: int | list[int | list[int] | None] | None
    core_types: list[CoreType]
    cpus: list[LogicalCpu]  # online CPUs
    numa_nodes: list[NumaNode]
    numa_stated: bool  # False: the dump had no node dir, one node was assumed
    isa: list[str]  # flags that matter (see hardware.isa), sorted
    memory_total_bytes: int | None  # /proc/meminfo MemTotal
    memory_available_bytes: int | None  # /proc/meminfo MemAvailable
    limits: Limits
    libnuma: Libnuma | None = None
    # Where `isa` came from: "cpuinfo" (on a live x86 machine its kernel flags kept
    # only where CPUID agrees), "hwcap" (the ELF auxiliary vector, when cpuinfo is
    # unreadable), "cpuid" (live x86, when cpuinfo is unreadable), or None where
    # nothing stated it (then isa is empty because unknown, not because the CPU
    # lacks the flags).
    isa_source: str | None = "cpuinfo"
    # What could not be read and what was assumed instead (one line each).
    notes: list[str] = field(default_factory=list)
    # Libraries worth preloading into stage processes (Intel OpenMP, tcmalloc), found
    # under the root and, live, the running interpreter's prefix: part of the facts so
    # a plan from a saved `probe --json` equals the live one.
    preload_libraries: list[str] = field(default_factory=list)
    # Sockets of each core type on hybrid machines (lscpu's per-type lines); None elsewhere.
    sockets_by_core_type: list[int | None] | None = None
    # The nodes that hold allowed CPUs or memory a replica may use (duplicates, device
    # memory and generic initiators left out), and how that number was counted.
    numa_node_count: int = 1
    numa_count_basis: str = ""
    # Where `sockets` came from: package sibling lists or ids, the allowed view's
    # packages of allowed memory, or why the kernel states none.
    sockets_source: str = ""
    # The whole machine (every online CPU, socket and node), where the cpuset and mems
    # narrow what the fields above describe; None in facts saved before schema 3.
    host: Host | None = None
    # x86's /proc/cpuinfo `cpu family` and `model` (with `vendor`: what the CPU is, where its
    # flags cannot tell two apart; omni_cpu.plan.costs.cpu_class); None where unstated.
    cpu_family: int | None = None
    cpu_model: int | None = None
    schema_version: int = SCHEMA_VERSION

    # -- derived views (pure) -------------------------------------------------

    def usable_memory_nodes(self) -> tuple[int, ...]:
        """Nodes allocations may come from: holding memory, and in cpuset.mems if set.

        A node that does not say (no mask, no meminfo: most dumps) counts; only one
        that states it holds none is left out, so a node with stated memory (a GPU's,
        CXL) never outranks a CPU node whose memory is merely unknown.
        """
        nodes = {
            node.id
            for node in self.numa_nodes
            if node.is_home()
            and (node.holds_memory() or (node.has_memory is None and node.memory_bytes is None))
        }
        if self.limits.cpuset_mems is not None:
            allowed = set(parse_cpu_list(self.limits.cpuset_mems))
            nodes = nodes & allowed if nodes & allowed else nodes
        return tuple(sorted(nodes))

    def node(self, node_id: int) -> NumaNode | None:
        return next((entry for entry in self.numa_nodes if entry.id == node_id), None)

    def node_of_cpu(self) -> dict[int, int]:
        """CPU -> the first node listing it (a node that repeats an earlier one adds nothing),
        else the node the kernel puts it on where that node is not listed (its memory is
        outside cpuset.mems, or it holds none)."""
        nodes: dict[int, int] = {}
        for node in self.numa_nodes:
            for cpu in parse_cpu_list(node.cpus):
                nodes.setdefault(cpu, node.id)
        for entry in self.cpus:
            if entry.node is not None:
                nodes.setdefault(entry.cpu, entry.node)
        return nodes

    def node_distance(self, first: int, second: int) -> int:
        """SLIT distance between two nodes, read from whichever of them is listed (a node
        outside the view has no row here, but the listed nodes' rows name it)."""
        for here, there in ((first, second), (second, first)):
            node = self.node(here)
            if node is not None and there in node.distances:
                return node.distances[there]
        return 10 if first == second else 20

    def usable_cpus(self) -> tuple[int, ...]:
        """Online CPUs this process may use: cpuset and affinity applied."""
        usable = set(parse_cpu_list(self.online_cpus))
        if self.limits.cpuset_cpus is not None:
            usable &= set(parse_cpu_list(self.limits.cpuset_cpus))
        if self.limits.affinity_cpus is not None:
            usable &= set(parse_cpu_list(self.limits.affinity_cpus))
        return tuple(sorted(usable))

    def cpu(self, cpu_id: int) -> LogicalCpu | None:
        return next((entry for entry in self.cpus if entry.cpu == cpu_id), None)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Facts:
        """Rebuild facts from `to_dict()` output (e.g. a saved `probe --json`)."""
        data = dict(data)
        data["core_types"] = [CoreType(**c) for c in data.get("core_types", [])]
        data["cpus"] = [LogicalCpu(**c) for c in data.get("cpus", [])]
        data["numa_nodes"] = [
            NumaNode(
                **{
                    **n,
                    "distances": {int(k): int(v) for k, v in n.get("distances", {}).items()},
                    "initiators": tuple(n.get("initiators", ())),
                }
            )
            for n in data.get("numa_nodes", [])
        ]
        data["limits"] = Limits(**data.get("limits", {}))
        if isinstance(data.get("sockets"), list):  # schema 2 listed sockets per core type
            per_type = data["sockets"]
            data["sockets_by_core_type"] = per_type
            data["sockets"] = None if any(v is None for v in per_type) else max(per_type)
        if data.get("host") is not None:
            data["host"] = Host(**data["host"])
        if "numa_node_count" not in data:
            data["numa_node_count"] = len(data["numa_nodes"])
        libnuma = data.get("libnuma")
        if libnuma is not None:
            libnuma = dict(libnuma)
            libnuma["node_memory_bytes"] = {
                int(k): v for k, v in libnuma.get("node_memory_bytes", {}).items()
            }
            data["libnuma"] = Libnuma(**libnuma)
        data["schema_version"] = SCHEMA_VERSION
        return cls(**data)
