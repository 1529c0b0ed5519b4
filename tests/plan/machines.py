"""Small hand-built machines for planner tests (real dumps are covered in test_dumps.py)."""

from __future__ import annotations

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
