"""Small hand-built machines: as facts for the planner (`machine`), as sysroots for the probe
(`FakeMachine`). Real machines' dumps are `tests.helpers.sysroots`."""

from __future__ import annotations

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
