"""Small hand-built machines: as facts for the planner (`machine`), as sysroots for the probe
(`FakeMachine`). Real machines' dumps are `tests.helpers.sysroots`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware.facts import CoreType, Facts, Limits, LogicalCpu, NumaNode

GIB = 1 << 30


def machine(
    nodes: dict[int, list[int]],
    *,
    smt: int = 1,
    memory_per_node: int | None = 64 * GIB,
    isa: tuple[str, ...] = ("avx2", "avx512f", "avx512_bf16"),
    architecture: str = "x86_64",
    limits: Limits | None = None,
    offline: tuple[int, ...] = (),
) -> Facts:
    """A machine whose NUMA node N holds the physical cores `nodes[N]`.

    With smt=2, core c has logical CPUs c and c + (total cores).
    """
    total = sum(len(cores) for cores in nodes.values())
    cpus: list[LogicalCpu] = []
    node_cpus: dict[int, list[int]] = {}
    for node, cores in nodes.items():
        for core in cores:
            siblings = [core + k * total for k in range(smt)]
            for cpu in siblings:
                node_cpus.setdefault(node, []).append(cpu)
                if cpu in offline:
                    continue
                cpus.append(
                    LogicalCpu(
                        cpu=cpu,
                        online=True,
                        core_id=core,
                        package_id=0,
                        node=node,
                        thread_siblings=format_cpu_list(s for s in siblings if s not in offline),
                    )
                )
    all_cpus = [c for cs in node_cpus.values() for c in cs]
    online = [c.cpu for c in cpus]
    return Facts(
        source="test",
        architecture=architecture,
        vendor="Test",
        model_names=["Test CPU"],
        possible_cpus=format_cpu_list(all_cpus),
        online_cpus=format_cpu_list(online),
        offline_cpus=format_cpu_list(offline),
        sockets=1,
        cores_per_socket=total,
        threads_per_core=smt,
        core_types=[CoreType("Test CPU", format_cpu_list(online), 1, total, smt)],
        cpus=sorted(cpus, key=lambda c: c.cpu),
        numa_nodes=[
            NumaNode(id=node, cpus=format_cpu_list(cs), memory_bytes=memory_per_node)
            for node, cs in node_cpus.items()
        ],
        numa_stated=True,
        isa=sorted(isa),
        memory_total_bytes=None if memory_per_node is None else memory_per_node * len(nodes),
        memory_available_bytes=None,
        limits=limits or Limits(),
    )


def with_memory(facts: Facts, total_bytes: int) -> Facts:
    """The same machine with `total_bytes` of memory (each node that states its own, too):
    a dump too small for the model (whose refusal its own test checks) still gets planned."""
    nodes = [
        dataclasses.replace(node, memory_bytes=node.memory_bytes and total_bytes)
        for node in facts.numa_nodes
    ]
    return dataclasses.replace(
        facts, memory_total_bytes=total_bytes, memory_available_bytes=total_bytes, numa_nodes=nodes
    )


class FakeMachine:
    """Writes a small sysfs/procfs tree, the way a real dump lays it out."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, path: str, text: str) -> FakeMachine:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if text.endswith("\n") else text + "\n")
        return self

    def cpus(
        self,
        online: list[int],
        present: list[int] | None = None,
        threads_per_core: int = 1,
        cores_per_socket: int | None = None,
        flags: str = "fpu lm avx avx2 avx512f avx512_bf16 amx_tile amx_bf16",
    ) -> FakeMachine:
        """CPU masks plus x86-style topology (SMT siblings at +cores), with these ISA flags."""
        present = present if present is not None else online
        self.write("/sys/devices/system/cpu/possible", format_cpu_list(present))
        self.write("/sys/devices/system/cpu/present", format_cpu_list(present))
        self.write("/sys/devices/system/cpu/online", format_cpu_list(online))
        self.write("/sys/devices/system/cpu/offline", format_cpu_list(set(present) - set(online)))
        cores = len(present) // threads_per_core
        per_socket = cores_per_socket or cores
        for cpu in online:
            core = cpu % cores
            socket = core // per_socket
            siblings = [core + t * cores for t in range(threads_per_core)]
            package = [
                c + t * cores
                for c in range(socket * per_socket, (socket + 1) * per_socket)
                for t in range(threads_per_core)
            ]
            base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
            self.write(f"{base}/core_id", str(core % per_socket))
            self.write(f"{base}/physical_package_id", str(socket))
            self.write(f"{base}/thread_siblings_list", format_cpu_list(siblings))
            self.write(f"{base}/core_siblings_list", format_cpu_list(package))
        blocks = [
            f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\n"
            f"flags\t\t: {flags}\n"
            for cpu in online
        ]
        return self.write("/proc/cpuinfo", "\n".join(blocks))

    def node(self, node_id: int, cpus: str, memory_kib: int = 1024 * 1024) -> FakeMachine:
        base = f"/sys/devices/system/node/node{node_id}"
        self.write(f"{base}/cpulist", cpus)
        return self.write(
            f"{base}/meminfo",
            f"Node {node_id} MemTotal:       {memory_kib} kB\n"
            f"Node {node_id} MemFree:        {memory_kib // 2} kB\n",
        )

    def meminfo(self, total_kib: int, available_kib: int) -> FakeMachine:
        return self.write(
            "/proc/meminfo",
            f"MemTotal:       {total_kib} kB\nMemFree:        {available_kib // 2} kB\n"
            f"MemAvailable:   {available_kib} kB\n",
        )

    def cgroup2(self, group: str, controllers: str = "cpuset cpu memory") -> FakeMachine:
        """This process in cgroup2 group `group`, the unified hierarchy at /sys/fs/cgroup."""
        self.write("/proc/self/cgroup", f"0::{group}\n")
        return self.write("/sys/fs/cgroup/cgroup.controllers", controllers)


# -- machine shapes that split CPUs from their memory ----------------------------------

NODE_DIR = "/sys/devices/system/node"
GIB_KIB = GIB >> 10


def cgroup2_job(machine: FakeMachine, cpus: str | None, mems: str) -> FakeMachine:
    """This process in cgroup2 /job with these effective cpus (None: unrestricted) and mems."""
    machine.cgroup2("/job", "cpuset")
    if cpus is not None:
        machine.write("/sys/fs/cgroup/job/cpuset.cpus.effective", cpus)
    return machine.write("/sys/fs/cgroup/job/cpuset.mems.effective", mems)


def node_per_socket(
    machine: FakeMachine, sockets: int, cores: int, node_gib: int = 16
) -> FakeMachine:
    """`sockets` packages of `cores` cores, one `node_gib` GiB NUMA node each, no distances."""
    machine.cpus(online=list(range(sockets * cores)), cores_per_socket=cores)
    for node in range(sockets):
        machine.node(
            node, f"{node * cores}-{node * cores + cores - 1}", memory_kib=node_gib * GIB_KIB
        )
    total_kib = sockets * node_gib * GIB_KIB
    return machine.meminfo(total_kib=total_kib, available_kib=sockets * GIB_KIB)


def cgroup1_job(
    machine: FakeMachine, cpus: str, mems: str, effective_cpus: str, effective_mems: str
) -> FakeMachine:
    """This process in cgroup v1's cpuset /job, whose effective lists differ from its own
    (a v1 cpuset mounted with cpuset_v2_mode, or one whose CPUs went offline and back)."""
    machine.write("/proc/self/cgroup", "3:cpuset:/job\n")
    base = "/sys/fs/cgroup/cpuset/job"
    machine.write(f"{base}/cpuset.cpus", cpus).write(f"{base}/cpuset.mems", mems)
    machine.write(f"{base}/cpuset.effective_cpus", effective_cpus)
    return machine.write(f"{base}/cpuset.effective_mems", effective_mems)


def dax_kmem_node(machine: FakeMachine, device: str, node: int, parent: str) -> FakeMachine:
    """DAX device `device` onlined by the kmem driver as NUMA node `node`; `parent` is the
    device path its sysfs link names (an NVDIMM's `.../ndbus0/region0`, hmem's `hmem.0`)."""
    target = machine.root / f"sys/devices/{parent}/{device}"
    machine.write(f"/sys/devices/{parent}/{device}/target_node", str(node))
    bus = machine.root / "sys/bus/dax/devices"
    bus.mkdir(parents=True, exist_ok=True)
    (bus / device).symlink_to(f"../../../devices/{parent}/{device}")
    kmem = machine.root / "sys/bus/dax/drivers/kmem"
    kmem.mkdir(parents=True, exist_ok=True)
    (kmem / device).symlink_to(f"../../../../devices/{parent}/{device}")
    assert (bus / device / "target_node").is_file() and target.is_dir()
    return machine


def tiered_memory_machine(machine: FakeMachine) -> FakeMachine:
    """2 sockets of 4 cores; CPU-only nodes 0-3 (a core pair each), generic initiator 4,
    DRAM nodes 5 (socket 0) and 6 (socket 1), NVM nodes 7 and 8, CXL node 9 (no HMAT)."""
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for node in range(4):
        machine.node(node, f"{node * 2}-{node * 2 + 1}", memory_kib=0)
    machine.node(4, "", memory_kib=0)
    tiers = {5: 32, 6: 32, 7: 256, 8: 256, 9: 512}
    for node, gib in tiers.items():
        machine.node(node, "", memory_kib=gib * GIB_KIB)
    machine.write(f"{NODE_DIR}/online", "0-9")
    machine.write(f"{NODE_DIR}/has_cpu", "0-3")
    machine.write(f"{NODE_DIR}/has_memory", "5-9")
    machine.write(f"{NODE_DIR}/has_normal_memory", "5-9")
    machine.write(f"{NODE_DIR}/has_generic_initiator", "4")
    # HMAT: access0 names the fastest initiator of any kind (the accelerator for DRAM 5),
    # access1 the fastest CPUs.
    for memory, cpu_nodes in {5: (0, 1), 6: (2, 3), 7: (0, 1), 8: (2, 3)}.items():
        for initiator in cpu_nodes:
            (
                machine.root
                / f"{NODE_DIR}/node{memory}/access1/initiators/node{initiator}".lstrip("/")
            ).mkdir(parents=True)
    (machine.root / f"{NODE_DIR}/node5/access0/initiators/node4".lstrip("/")).mkdir(parents=True)

    def distance(a: int, b: int) -> int:
        socket = {0: 0, 1: 0, 2: 1, 3: 1, 5: 0, 6: 1, 7: 0, 8: 1}
        if a == b:
            return 10
        if 4 in (a, b) or 9 in (a, b):
            return 30
        near = socket[a] == socket[b]
        tier = {5: 2, 6: 2, 7: 7, 8: 7}.get(a, 0) + {5: 2, 6: 2, 7: 7, 8: 7}.get(b, 0)
        return (11 if near else 21) + tier

    for node in range(10):
        machine.write(
            f"{NODE_DIR}/node{node}/distance", " ".join(str(distance(node, o)) for o in range(10))
        )
    # The kernel's top cpuset allows every node with memory: nodes 5-9.
    cgroup2_job(machine, None, "5-9")
    return machine.meminfo(total_kib=1088 * GIB_KIB, available_kib=1000 * GIB_KIB)


def nvm_tiered_machine(machine: FakeMachine) -> FakeMachine:
    """The tiered machine with its NVM nodes 7 and 8 as a persistent-memory box onlines them:
    NVDIMM regions' DAX devices given to the kmem driver, all ZONE_MOVABLE."""
    tiered_memory_machine(machine)
    machine.write(f"{NODE_DIR}/has_normal_memory", "5-6,9")
    nvdimm_bus = "LNXSYSTM:00/LNXSYBUS:00/ACPI0012:00/ndbus0"
    dax_kmem_node(machine, "dax0.0", 7, f"{nvdimm_bus}/region0/dax0.0")
    return dax_kmem_node(machine, "dax1.0", 8, f"{nvdimm_bus}/region1/dax1.0")


def every_node_lists_every_cpu(machine: FakeMachine, node_gib: list[float]) -> FakeMachine:
    """Buggy firmware NUMA: 2 sockets of 4 cores, one node per entry of `node_gib`, each
    naming every CPU; the memory is split over them (sizes differ, so none is a copy)."""
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for node, gib in enumerate(node_gib):
        machine.node(node, "0-7", memory_kib=int(gib * GIB_KIB))
    total_kib = int(sum(node_gib) * GIB_KIB)
    return machine.meminfo(total_kib=total_kib, available_kib=total_kib - GIB_KIB)


def s390_lpar(machine: FakeMachine, sockets: int, cores: int) -> FakeMachine:
    """An s390 LPAR: `sockets` groups of `cores` CPUs by their core_siblings lists, two books,
    every physical_package_id -1 (the kernel states no package id on s390)."""
    cpus = sockets * cores
    machine.write("/sys/devices/system/cpu/online", f"0-{cpus - 1}")
    machine.write("/sys/devices/system/cpu/possible", f"0-{cpus - 1}")
    per_book = cpus // 2
    for cpu in range(cpus):
        group, book = cpu // cores, cpu // per_book
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        machine.write(f"{base}/physical_package_id", "-1")
        machine.write(f"{base}/core_id", str(cpu))
        machine.write(f"{base}/thread_siblings_list", str(cpu))
        machine.write(f"{base}/core_siblings_list", f"{group * cores}-{group * cores + cores - 1}")
        machine.write(
            f"{base}/book_siblings_list", f"{book * per_book}-{book * per_book + per_book - 1}"
        )
        machine.write(f"{base}/book_id", str(book))
    blocks = f"vendor_id       : IBM/S390\n# processors    : {cpus}\nfeatures\t: esan3 zarch\n"
    blocks += "".join(
        f"processor {cpu}: version = FF,  identification = 0{cpu},  machine = 8561\n"
        for cpu in range(cpus)
    )
    return machine.write("/proc/cpuinfo", blocks)
