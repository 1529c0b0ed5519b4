"""Every cgroup layout and NUMA as the kernel means it, on synthetic sysroots."""

from __future__ import annotations

import struct

from omni_cpu.hardware.limits import read_limits
from omni_cpu.hardware.probe import read_facts
from omni_cpu.hardware.sysroot import SysRoot

GIB = 1024**3


# -- cgroup v1 ---------------------------------------------------------------------


def test_v1_cpuset_found_through_proc_self_cpuset_and_proc_mounts_at_any_mount_point(machine):
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.write("/proc/self/cpuset", "/batch/job7")
    machine.write("/proc/mounts", "cpuset /dev/cpuset cgroup rw,nosuid,cpuset,noprefix 0 0\n")
    machine.write("/dev/cpuset/batch/job7/cpus", "2-4")
    machine.write("/dev/cpuset/batch/job7/mems", "0")
    facts = read_facts(machine.root)
    assert facts.limits.cgroup_version == 1
    assert facts.usable_cpus() == (2, 3, 4)
    assert facts.limits.cpuset_mems == "0"


def test_v1_legacy_cpuset_filesystem_uses_unprefixed_names(machine):
    machine.write("/proc/self/cgroup", "2:cpuset:/pinned\n")
    machine.write("/proc/mounts", "none /cpusets cpuset rw 0 0\n")
    machine.write("/cpusets/pinned/effective_cpus", "6-7")
    assert read_limits(SysRoot(machine.root)).cpuset_cpus == "6-7"


# -- cgroup v2 ---------------------------------------------------------------------

STEP = "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"


def _slurm_machine(machine):
    machine.cpus(online=list(range(32)))
    for node in range(8):
        machine.node(node, f"{node * 4}-{node * 4 + 3}", memory_kib=16 * 1024 * 1024)
    machine.write("/proc/self/cgroup", f"0::{STEP}\n")
    machine.write(
        "/proc/self/mountinfo",
        "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    )
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory")
    # The dump stops at the step: user/task_0 were not copied.
    step = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0"
    machine.write(f"{step}/cpuset.cpus.effective", "4-9")
    machine.write(f"{step}/cpuset.mems.effective", "1-6")
    machine.write(f"{step}/memory.max", str(48 * GIB))
    machine.write("/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/cpu.max", "600000 100000")
    return machine


def test_nested_v2_job_step_binds_its_cpus_nodes_quota_and_memory(machine):
    facts = read_facts(_slurm_machine(machine).root)
    assert facts.usable_cpus() == (4, 5, 6, 7, 8, 9)
    assert facts.limits.cpuset_mems == "1-6"
    assert facts.usable_memory_nodes() == (1, 2, 3, 4, 5, 6)
    assert facts.limits.cpu_quota_cores == 6.0
    assert facts.limits.memory_max_bytes == 48 * GIB


def test_dump_without_proc_self_reads_the_cgroup_chain_it_holds(machine):
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory")
    machine.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", "1,3")
    machine.write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "200000 100000")
    facts = read_facts(machine.root)
    assert facts.usable_cpus() == (1, 3)
    assert facts.limits.cpu_quota_cores == 2.0


def test_v2_configured_cpuset_binds_where_no_effective_file_is_present(machine):
    machine.cgroup2("/a/b", controllers="cpuset")
    machine.write("/sys/fs/cgroup/a/cpuset.cpus", "0-5")
    machine.write("/sys/fs/cgroup/a/b/cpuset.cpus", "4-9")
    assert read_limits(SysRoot(machine.root)).cpuset_cpus == "4-5"


# -- NUMA --------------------------------------------------------------------------


def test_node_masks_mark_memoryless_memory_only_and_initiator_nodes(machine):
    machine.cpus(online=list(range(4)))
    machine.node(0, "0-1").node(1, "2-3", memory_kib=0).node(2, "").node(3, "")
    machine.write("/sys/devices/system/node/has_memory", "0,2-3")
    machine.write("/sys/devices/system/node/has_cpu", "0-1")
    machine.write("/sys/devices/system/node/has_generic_initiator", "3")
    facts = read_facts(machine.root)
    kinds = [(n.id, n.cpus, n.holds_memory(), n.generic_initiator) for n in facts.numa_nodes]
    assert kinds == [(0, "0-1", True, False), (1, "2-3", False, False),
                     (2, "", True, False), (3, "", True, True)]  # fmt: skip
    assert facts.usable_memory_nodes() == (0, 2, 3)


def test_distance_table_is_read_per_node(machine):
    machine.cpus(online=[0, 1]).node(0, "0").node(1, "1")
    machine.write("/sys/devices/system/node/node0/distance", "10 21")
    machine.write("/sys/devices/system/node/node1/distance", "21 10")
    facts = read_facts(machine.root)
    assert facts.numa_nodes[0].distances == {0: 10, 1: 21}
    assert facts.numa_nodes[1].distance_to(0) == 21


def test_offline_cpus_are_left_out_of_node_lists(machine):
    machine.cpus(online=[0, 1, 3], present=[0, 1, 2, 3]).node(0, "0-3")
    assert read_facts(machine.root).numa_nodes[0].cpus == "0-1,3"


# -- topology and ISA --------------------------------------------------------------


def _arm_machine(machine, cluster_files: bool):
    machine.write("/sys/devices/system/cpu/online", "0-7")
    for cpu in range(8):
        package = cpu // 4
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        machine.write(f"{base}/core_id", str(cpu % 4))
        machine.write(f"{base}/physical_package_id", str(package))
        machine.write(f"{base}/thread_siblings_list", str(cpu))
        machine.write(f"{base}/package_cpus_list", f"{package * 4}-{package * 4 + 3}")
        if cluster_files:
            machine.write(f"{base}/cluster_id", str(cpu // 2))
    blocks = [
        f"processor\t: {cpu}\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU part\t: 0xd40\n"
        for cpu in range(8)
    ]
    return machine.write("/proc/cpuinfo", "\n".join(blocks))


def test_aarch64_sockets_from_package_files_without_pptt(machine):
    facts = read_facts(_arm_machine(machine, cluster_files=True).root)
    assert facts.architecture == "aarch64"
    assert (facts.sockets, facts.cores_per_socket) == (2, 4)


def test_aarch64_kernel_that_calls_clusters_packages_leaves_sockets_unknown(machine):
    assert read_facts(_arm_machine(machine, cluster_files=False).root).sockets is None


def test_mixed_smt_gives_threads_per_core_as_a_list(machine):
    machine.cpus(online=list(range(8)), threads_per_core=2)
    # Cores 2 and 3 run one thread: their siblings are offline.
    machine.write("/sys/devices/system/cpu/online", "0-5")
    for cpu in (2, 3):
        machine.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", str(cpu))
    facts = read_facts(machine.root)
    assert facts.threads_per_core == [1, 2]


def _auxv(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack("<QQ", kind, value) for kind, value in (*pairs, (0, 0)))


def test_unreadable_cpuinfo_leaves_a_note_and_takes_the_isa_from_hwcaps(machine):
    machine.write("/proc/sys/kernel/arch", "aarch64")
    machine.write("/sys/devices/system/cpu/online", "0-3")
    machine.write("/proc/cpuinfo", "\x00garbage without fields")
    target = machine.root / "proc/self/auxv"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(_auxv((16, 0b11), (26, 1 << 14)))  # fp, asimd; bf16
    facts = read_facts(machine.root)
    assert facts.isa == ["asimd", "bf16", "fp"]
    assert facts.isa_source == "hwcap"
    assert any("cpuinfo" in note for note in facts.notes)


def test_missing_cpuinfo_on_x86_marks_the_isa_unknown_not_absent(machine):
    machine.write("/proc/sys/kernel/arch", "x86_64")
    machine.write("/sys/devices/system/cpu/online", "0-1")
    facts = read_facts(machine.root)
    assert facts.isa == [] and facts.isa_source is None
    assert any("ISA unknown" in note for note in facts.notes)


def test_preload_libraries_are_part_of_the_facts(machine):
    machine.cpus(online=[0])
    machine.write("/usr/lib/libiomp5.so", "")
    facts = read_facts(machine.root)
    assert facts.preload_libraries == ["/usr/lib/libiomp5.so"]  # as on that machine
    assert type(facts).from_dict(facts.to_dict()) == facts
