"""The probe on layouts the real dumps here do not hold (issue 22's remaining classes).

Each machine is built in the shape such a machine's dump has; each test failed on the
probe before the fix it names.
"""

from __future__ import annotations

from omni_cpu.hardware.limits import read_limits
from omni_cpu.hardware.probe import read_facts
from omni_cpu.hardware.sysroot import SysRoot

GIB = 1024**3

# A hybrid host's mount table: the unified hierarchy at /sys/fs/cgroup, and the
# legacy cpuset file system at /dev/cpuset.
CGROUP2_BESIDE_LEGACY_CPUSET = (
    "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
    "41 25 0:36 / /dev/cpuset rw,relatime shared:21 - cgroup cgroup "
    "rw,cpuset,noprefix,release_agent=/sbin/cpuset_release_agent\n"
)


# -- cgroups -----------------------------------------------------------------------


def test_legacy_cpuset_beside_cgroup2_binds_cpus_there_and_quota_and_memory_here(machine):
    # A hybrid host: the cpuset controller on the legacy cpuset file system, cpu
    # and memory on the unified hierarchy. Each limit comes from its own hierarchy.
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.write("/proc/self/cgroup", "3:cpuset:/batch/job7\n0::/user.slice/job7.scope\n")
    machine.write("/proc/self/mountinfo", CGROUP2_BESIDE_LEGACY_CPUSET)
    machine.write("/dev/cpuset/batch/job7/cpus", "2-3")
    machine.write("/dev/cpuset/batch/job7/mems", "0")
    machine.write("/sys/fs/cgroup/user.slice/job7.scope/memory.max", str(2 * GIB))
    machine.write("/sys/fs/cgroup/user.slice/job7.scope/cpu.max", "100000 100000")
    facts = read_facts(machine.root)
    assert facts.usable_cpus() == (2, 3)
    assert facts.limits.memory_max_bytes == 2 * GIB
    assert facts.limits.cpu_quota_cores == 1.0


def test_proc_self_cpuset_names_the_job_on_a_cgroup2_mounted_elsewhere(machine):
    # A dump that recorded /proc/self/cpuset and /proc/mounts but not /proc/self/cgroup:
    # on cgroup2 /proc/self/cpuset is the process's v2 path.
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.write("/proc/self/cpuset", "/job_42/step_0")
    machine.write("/proc/mounts", "cgroup2 /run/batch/cgroup cgroup2 rw,nosuid,nodev 0 0\n")
    machine.write("/run/batch/cgroup/cgroup.controllers", "cpuset cpu memory")
    machine.write("/run/batch/cgroup/job_42/step_0/cpuset.cpus.effective", "5")
    machine.write("/run/batch/cgroup/job_42/memory.max", str(3 * GIB))
    facts = read_facts(machine.root)
    assert facts.usable_cpus() == (5,)
    assert facts.limits.memory_max_bytes == 3 * GIB


def test_proc_self_cpuset_alone_locates_the_cgroup2_directory(machine):
    machine.write("/proc/self/cpuset", "/a")
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpuset")
    machine.write("/sys/fs/cgroup/a/cpuset.cpus.effective", "1")
    machine.write("/sys/fs/cgroup/b/cpuset.cpus.effective", "2")
    assert read_limits(SysRoot(machine.root)).cpuset_cpus == "1"


def test_the_cgroup2_mount_that_holds_the_job_step_is_the_one_read(machine):
    # The first cgroup2 mount is another subtree's bind mount (a sidecar's view);
    # the scheduler mounted the hierarchy's root where the job step lives.
    step = "/slurm/uid_1000/job_42/step_0"
    machine.cpus(online=list(range(16))).node(0, "0-15")
    machine.write("/proc/self/cgroup", f"0::{step}\n")
    machine.write(
        "/proc/self/mountinfo",
        "30 25 0:26 /system.slice/sidecar.service /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        "52 30 0:26 / /var/spool/slurmd/cgroup rw - cgroup2 cgroup2 rw\n",
    )
    machine.write("/sys/fs/cgroup/cpuset.cpus.effective", "0-15")
    machine.write(f"/var/spool/slurmd/cgroup{step}/cpuset.cpus.effective", "8-11")
    machine.write("/var/spool/slurmd/cgroup/slurm/uid_1000/job_42/cpu.max", "400000 100000")
    facts = read_facts(machine.root)
    assert facts.usable_cpus() == (8, 9, 10, 11)
    assert facts.limits.cpu_quota_cores == 4.0


def test_pure_cgroup2_ignores_an_unused_legacy_cpuset_mount(machine):
    # /proc/self/cpuset names the v2 path; the legacy mount holds nothing of this process.
    machine.cpus(online=list(range(8))).node(0, "0-7")
    machine.write("/proc/self/cgroup", "0::/pod/app\n")
    machine.write("/proc/self/cpuset", "/pod/app")
    machine.write("/proc/self/mountinfo", CGROUP2_BESIDE_LEGACY_CPUSET)
    machine.write("/dev/cpuset/cpus", "0-7")
    machine.write("/sys/fs/cgroup/pod/app/cpuset.cpus.effective", "6-7")
    facts = read_facts(machine.root)
    assert facts.limits.cgroup_version == 2
    assert facts.usable_cpus() == (6, 7)


# -- NUMA --------------------------------------------------------------------------


def test_a_cpu_node_of_unknown_memory_is_not_outranked_by_a_gpu_memory_node(machine):
    # Node 1 is a GPU's memory (stated); node 0's meminfo is missing from the dump.
    machine.cpus(online=list(range(8))).node(0, "0-7").node(1, "", memory_kib=96 * 1024**2)
    (machine.root / "sys/devices/system/node/node0/meminfo").unlink()
    facts = read_facts(machine.root)
    assert facts.usable_memory_nodes() == (0, 1)


# -- sockets -----------------------------------------------------------------------

TOPOLOGY = "/sys/devices/system/cpu/cpu{}/topology"


def test_package_ids_count_sockets_where_the_kernel_gives_no_package_lists(machine):
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for cpu in range(8):
        (machine.root / TOPOLOGY.format(cpu).lstrip("/") / "core_siblings_list").unlink()
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.cores_per_socket) == (2, 4)


def test_package_ids_count_sockets_where_every_package_list_is_empty(machine):
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for cpu in range(8):
        (machine.root / TOPOLOGY.format(cpu).lstrip("/") / "core_siblings_list").unlink()
        machine.write(f"{TOPOLOGY.format(cpu)}/core_siblings", "00000000")
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.cores_per_socket) == (2, 4)


def test_a_two_die_aarch64_box_whose_cpuinfo_lists_one_die_is_one_core_type(machine):
    # PPTT-described packages (one per die); /proc/cpuinfo as LXCFS shows it inside a
    # container: the first die's CPUs only. The machine is still 2 x 4 cores, not lists.
    machine.write("/sys/firmware/acpi/tables/PPTT", "")
    machine.write("/sys/devices/system/cpu/online", "0-7")
    for cpu in range(8):
        package = cpu // 4
        base = TOPOLOGY.format(cpu)
        machine.write(f"{base}/core_id", str(cpu % 4))
        machine.write(f"{base}/physical_package_id", str(package))
        machine.write(f"{base}/thread_siblings_list", str(cpu))
        machine.write(f"{base}/package_cpus_list", f"{package * 4}-{package * 4 + 3}")
    blocks = [
        f"processor\t: {cpu}\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU part\t: 0xd4f\n"
        for cpu in range(4)
    ]
    machine.write("/proc/cpuinfo", "\n".join(blocks))
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (2, 4, 1)
    assert [t.cpus for t in facts.core_types] == ["0-7"]
