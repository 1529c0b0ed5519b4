"""Fixtures for the probe: facts of each real dump, and synthetic machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware.facts import Facts
from omni_cpu.hardware.probe import read_facts


@pytest.fixture(scope="session")
def _facts_cache() -> dict[Path, Facts]:
    return {}


@pytest.fixture
def dump_facts(dump_root: Path, _facts_cache: dict[Path, Facts]) -> Facts:
    """`read_facts` of the parametrized dump, read once per session."""
    if dump_root not in _facts_cache:
        _facts_cache[dump_root] = read_facts(dump_root)
    return _facts_cache[dump_root]


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
    ) -> FakeMachine:
        """CPU masks plus x86-style topology (SMT siblings at +cores)."""
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
            "flags\t\t: fpu lm avx avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
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


@pytest.fixture
def machine(tmp_path: Path) -> FakeMachine:
    """An empty synthetic sysroot to fill in."""
    return FakeMachine(tmp_path / "root")
