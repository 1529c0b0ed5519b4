"""The probe on synthetic sysroots: the cases real dumps here do not cover."""

from __future__ import annotations

import pytest

from omni_cpu.errors import SysrootError
from omni_cpu.hardware.probe import read_facts


def test_offline_cpu0_is_listed_offline_and_left_out_of_cpus(machine):
    machine.cpus(online=[1, 2, 3], present=[0, 1, 2, 3]).node(0, "1-3")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "1-3"
    assert facts.offline_cpus == "0"
    assert [c.cpu for c in facts.cpus] == [1, 2, 3]


def test_memory_only_node_is_kept_with_no_cpus(machine):
    machine.cpus(online=[0, 1]).node(0, "0-1").node(1, "", memory_kib=4 * 1024 * 1024)
    facts = read_facts(machine.root)
    assert [(n.id, n.cpus) for n in facts.numa_nodes] == [(0, "0-1"), (1, "")]
    assert facts.numa_nodes[1].memory_bytes == 4 * 1024**3
    assert facts.numa_nodes[1].free_bytes == 2 * 1024**3


def test_sparse_node_ids_keep_their_numbers(machine):
    machine.cpus(online=list(range(8))).node(0, "0-3").node(2, "4-5").node(3, "6-7")
    facts = read_facts(machine.root)
    assert [n.id for n in facts.numa_nodes] == [0, 2, 3]
    assert facts.cpu(5).node == 2


def test_no_node_directory_means_one_assumed_node_with_all_memory(machine):
    machine.cpus(online=[0, 1, 2, 3]).meminfo(total_kib=8 * 1024 * 1024, available_kib=1024)
    facts = read_facts(machine.root)
    assert facts.numa_stated is False
    assert [(n.id, n.cpus, n.memory_bytes) for n in facts.numa_nodes] == [(0, "0-3", 8 * 1024**3)]


def test_smt_siblings_give_threads_per_core_and_sockets(machine):
    machine.cpus(online=list(range(16)), threads_per_core=2, cores_per_socket=4)
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (2, 4, 2)
    assert facts.cpu(0).thread_siblings == "0,8"


def test_container_cpuset_restricts_usable_cpus(machine):
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.cgroup2("/pod/app")
    machine.write("/sys/fs/cgroup/pod/app/cpuset.cpus.effective", "2-3,6")
    facts = read_facts(machine.root)
    assert facts.usable_cpus() == (2, 3, 6)
    # What this process may use, as hwloc reports it; the whole machine under `host`.
    assert facts.online_cpus == "2-3,6"
    assert facts.host is not None and facts.host.online_cpus == "0-7"


def test_intel_hybrid_gives_one_core_type_per_kind(machine):
    machine.cpus(online=list(range(6)))
    machine.write("/sys/devices/cpu_core/cpus", "0-1")
    machine.write("/sys/devices/cpu_atom/cpus", "2-5")
    facts = read_facts(machine.root)
    assert [(t.kind, t.cpus) for t in facts.core_types] == [
        ("performance", "0-1"),
        ("efficiency", "2-5"),
    ]
    assert facts.cores_per_socket == [2, 4]
    assert facts.threads_per_core == [1, 1]
    assert facts.cpu(3).core_type == 1


def test_garbage_topology_file_degrades_that_field_only(machine):
    machine.cpus(online=[0, 1]).node(0, "0-1")
    machine.write("/sys/devices/system/cpu/cpu1/topology/core_id", "not a number")
    machine.write("/sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "1-x")
    facts = read_facts(machine.root)
    assert facts.cpu(1).core_id is None
    assert facts.cpu(0).core_id == 0
    assert facts.online_cpus == "0-1"


def test_dump_with_only_cpuinfo_still_reads_cpus(machine):
    machine.write("/proc/cpuinfo", "processor\t: 0\nflags\t: lm avx2\nvendor_id\t: X\n\n")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "0"
    assert facts.architecture == "x86_64"
    assert facts.isa == ["avx2"]


def test_stated_architecture_file_wins_over_cpuinfo(machine):
    machine.cpus(online=[0]).write("/proc/sys/kernel/arch", "ppc64le")
    assert read_facts(machine.root).architecture == "ppc64le"


def test_kernel_byte_order_decides_between_ppc64_and_ppc64le(machine):
    machine.write("/proc/cpuinfo", "processor\t: 0\ncpu\t: POWER9 (raw)\nplatform\t: PowerNV\n")
    machine.write("/sys/kernel/cpu_byteorder", "big")
    assert read_facts(machine.root).architecture == "ppc64"


def test_root_that_is_not_a_dump_is_a_sysroot_error(tmp_path):
    with pytest.raises(SysrootError, match="neither proc/ nor sys/"):
        read_facts(tmp_path)


def test_missing_root_is_a_sysroot_error(tmp_path):
    with pytest.raises(SysrootError, match="not a directory"):
        read_facts(tmp_path / "absent")


def test_junk_in_every_file_degrades_without_crashing(machine):
    machine.cpus(online=[0, 1], present=[0, 1, 2]).node(0, "0-1")
    machine.cgroup2("/app", controllers="cpu")
    for name in ("cpu.max", "memory.max", "cpuset.cpus.effective"):
        machine.write(f"/sys/fs/cgroup/app/{name}", "\x00\xff junk -1 : , -")
    for path in sorted(p for p in machine.root.rglob("*") if p.is_file()):
        path.write_bytes(b"\xff\xfe junk: 0x-1 , -3--\n\n: :")
    facts = read_facts(machine.root)
    assert facts.architecture == "unknown"
    assert facts.limits.cpu_quota_cores is None


def test_ia64_architecture_comes_from_cpuinfo_where_the_dump_has_no_arch_file(machine):
    machine.write(
        "/proc/cpuinfo",
        "processor  : 0\nvendor     : GenuineIntel\narch       : IA-64\n"
        "family     : Itanium 2\nmodel      : 2\nfeatures   : branchlong\n\n"
        "processor  : 1\nvendor     : GenuineIntel\narch       : IA-64\n"
        "family     : Itanium 2\nmodel      : 2\nfeatures   : branchlong\n",
    )
    machine.write("/sys/devices/system/cpu/online", "0-1")
    facts = read_facts(machine.root)
    assert facts.architecture == "ia64"
    assert not any("architecture unknown" in note for note in facts.notes)
