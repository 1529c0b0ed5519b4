"""Container limits from synthetic cgroup v1 and v2 trees."""

from __future__ import annotations

from omni_cpu.hardware.facts import Limits
from omni_cpu.hardware.limits import read_limits
from omni_cpu.hardware.probe import read_facts
from omni_cpu.hardware.sysroot import SysRoot

GIB = 1024**3


def v1_machine(machine, path="/docker/abc"):
    machine.write(
        "/proc/self/cgroup",
        f"5:memory:{path}\n4:cpu,cpuacct:{path}\n3:cpuset:{path}\n1:name=systemd:{path}\n",
    )
    for controller in ("memory", "cpu,cpuacct", "cpuset"):
        machine.write(f"/sys/fs/cgroup/{controller}/tasks", "")
    return machine


def test_v2_reads_cpuset_quota_and_memory_max(machine):
    machine.cgroup2("/app")
    machine.write("/sys/fs/cgroup/app/cpuset.cpus.effective", "0-3")
    machine.write("/sys/fs/cgroup/app/cpu.max", "150000 100000")
    machine.write("/sys/fs/cgroup/app/memory.max", str(8 * GIB))
    assert read_limits(SysRoot(machine.root)) == Limits(
        cgroup_version=2, cpuset_cpus="0-3", cpu_quota_cores=1.5, memory_max_bytes=8 * GIB
    )


def test_v2_max_means_no_limit(machine):
    machine.cgroup2("/app")
    machine.write("/sys/fs/cgroup/app/cpu.max", "max 100000")
    machine.write("/sys/fs/cgroup/app/memory.max", "max")
    limits = read_limits(SysRoot(machine.root))
    assert (limits.cpu_quota_cores, limits.memory_max_bytes) == (None, None)


def test_v2_tightest_ancestor_limit_wins(machine):
    machine.cgroup2("/pod/app")
    machine.write("/sys/fs/cgroup/pod/memory.max", str(2 * GIB))
    machine.write("/sys/fs/cgroup/pod/app/memory.max", "max")
    machine.write("/sys/fs/cgroup/pod/cpu.max", "200000 100000")
    machine.write("/sys/fs/cgroup/pod/app/cpu.max", "400000 100000")
    limits = read_limits(SysRoot(machine.root))
    assert limits.memory_max_bytes == 2 * GIB
    assert limits.cpu_quota_cores == 2.0


def test_v2_path_from_another_namespace_falls_back_to_the_mount(machine):
    machine.cgroup2("/host/only/path")
    machine.write("/sys/fs/cgroup/memory.max", str(GIB))
    assert read_limits(SysRoot(machine.root)).memory_max_bytes == GIB


def test_v1_reads_cpuset_cfs_quota_and_memory_limit(machine):
    v1_machine(machine)
    machine.write("/sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "4-7")
    machine.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000")
    machine.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000")
    machine.write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", str(4 * GIB))
    assert read_limits(SysRoot(machine.root)) == Limits(
        cgroup_version=1, cpuset_cpus="4-7", cpu_quota_cores=2.5, memory_max_bytes=4 * GIB
    )


def test_v1_unlimited_sentinels_mean_no_limit(machine):
    v1_machine(machine)
    machine.write("/sys/fs/cgroup/cpuset/docker/abc/cpuset.cpus", "0-1")
    machine.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1")
    machine.write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712")
    limits = read_limits(SysRoot(machine.root))
    assert limits.cpuset_cpus == "0-1"
    assert (limits.cpu_quota_cores, limits.memory_max_bytes) == (None, None)


def test_mountinfo_locates_controllers_mounted_elsewhere(machine):
    machine.write("/proc/self/cgroup", "3:memory:/job\n")
    machine.write(
        "/proc/self/mountinfo",
        "30 25 0:26 / /cg/mem rw,relatime shared:9 - cgroup cgroup rw,memory\n",
    )
    machine.write("/cg/mem/job/memory.limit_in_bytes", str(3 * GIB))
    assert read_limits(SysRoot(machine.root)).memory_max_bytes == 3 * GIB


def test_no_cgroup_files_give_empty_limits(machine):
    machine.cpus(online=[0])
    limits = read_facts(machine.root).limits
    assert limits.cgroup_version is None
    assert limits.cpuset_cpus is None
