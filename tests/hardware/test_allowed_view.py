"""The facts say what this process may use, as hwloc does by default: the CPUs of the
cgroup's cpuset, the sockets they sit in, the nodes holding them or the memory
cpuset.mems allows. The whole machine stays under `host` and in one table row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from omni_cpu.hardware.probe import read_facts
from tests.helpers.machines import FakeMachine

GIB_KIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]


def _host_32_cpus_4_sockets_8_nodes(machine: FakeMachine) -> FakeMachine:
    machine.cpus(online=list(range(32)), cores_per_socket=8)
    for node in range(8):
        machine.node(node, f"{node * 4}-{node * 4 + 3}", memory_kib=8 * GIB_KIB)
    return machine.meminfo(total_kib=64 * GIB_KIB, available_kib=60 * GIB_KIB)


def _v2_container(machine: FakeMachine, cpus: str, mems: str) -> FakeMachine:
    machine.write("/proc/self/cgroup", "0::/kubepods/pod7/app\n")
    machine.write(
        "/proc/self/mountinfo",
        "30 24 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    )
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory")
    machine.write("/sys/fs/cgroup/kubepods/pod7/app/cpuset.cpus.effective", cpus)
    return machine.write("/sys/fs/cgroup/kubepods/pod7/app/cpuset.mems.effective", mems)


def test_a_6_cpu_cpuset_on_a_32_cpu_8_node_host_is_what_the_facts_describe(machine):
    facts = read_facts(_v2_container(_host_32_cpus_4_sockets_8_nodes(machine), "0-5", "0-1").root)
    assert facts.online_cpus == "0-5"
    assert [cpu.cpu for cpu in facts.cpus] == [0, 1, 2, 3, 4, 5]
    assert facts.sockets == 1
    assert [(node.id, node.cpus) for node in facts.numa_nodes] == [(0, "0-3"), (1, "4-5")]
    assert facts.numa_node_count == 2


def test_the_whole_host_stays_under_its_own_key(machine):
    facts = read_facts(_v2_container(_host_32_cpus_4_sockets_8_nodes(machine), "0-5", "0-1").root)
    assert facts.host is not None
    assert (facts.host.online_cpus, facts.host.cpu_count) == ("0-31", 32)
    assert (facts.host.sockets, facts.host.numa_node_count) == (4, 8)


def test_cpus_spread_over_two_sockets_count_both(machine):
    facts = read_facts(_v2_container(_host_32_cpus_4_sockets_8_nodes(machine), "6-9", "1-2").root)
    assert facts.sockets == 2
    assert [(node.id, node.cpus) for node in facts.numa_nodes] == [(1, "6-7"), (2, "8-9")]


def test_nodes_whose_memory_mems_allows_stay_without_their_cpus(machine):
    # hwloc keeps a NUMA node whose memory is allowed, with no allowed CPUs under it.
    facts = read_facts(_v2_container(_host_32_cpus_4_sockets_8_nodes(machine), "0-3", "0-2").root)
    assert [(node.id, node.cpus) for node in facts.numa_nodes] == [(0, "0-3"), (1, ""), (2, "")]
    assert facts.numa_node_count == 3


def test_a_v1_cpuset_mounted_anywhere_narrows_the_facts_too(machine):
    _host_32_cpus_4_sockets_8_nodes(machine)
    machine.write("/proc/self/cgroup", "4:cpuset:/slurm/uid_1/job_9/step_0\n")
    machine.write(
        "/proc/self/mountinfo",
        "40 24 0:35 / /cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
    )
    machine.write("/cgroup/cpuset/slurm/uid_1/job_9/cpuset.cpus", "16-23")
    machine.write("/cgroup/cpuset/slurm/uid_1/job_9/cpuset.mems", "4-5")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "16-23"
    assert facts.sockets == 1
    assert [node.id for node in facts.numa_nodes] == [4, 5]
    assert facts.host is not None and facts.host.cpu_count == 32


def test_no_cgroup_leaves_the_facts_equal_to_the_host(machine):
    facts = read_facts(_host_32_cpus_4_sockets_8_nodes(machine).root)
    assert facts.online_cpus == facts.host.online_cpus == "0-31"
    assert facts.sockets == facts.host.sockets == 4
    assert facts.numa_node_count == facts.host.numa_node_count == 8


def test_the_table_prints_the_host_in_one_row_and_every_cpu_list_as_ranges(machine):
    root = _v2_container(_host_32_cpus_4_sockets_8_nodes(machine), "0-5", "0-1").root
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    rows = {
        cells[0]: cells[1]
        for line in done.stdout.splitlines()
        if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 2
    }
    assert rows["host"] == "32 CPUs (0-31), 4 sockets, 8 nodes"
    assert rows["online CPUs"] == "0-5"
    assert rows["usable CPUs"] == "0-5"
    assert rows["NUMA nodes"].startswith("2")
    assert "0,1,2" not in done.stdout


def test_validate_calls_a_cpu_outside_the_cpuset_barred_not_offline(machine):
    from omni_cpu.plan import footprint_for_model, plan_profile
    from omni_cpu.plan.fit import check_profile

    host = read_facts(_host_32_cpus_4_sockets_8_nodes(machine).root)
    profile = plan_profile(host, footprint_for_model("0.6b"))
    inside = read_facts(_v2_container(machine, "0-5", "0-1").root)
    problems = check_profile(profile, inside)
    assert any("outside this process's cgroup cpuset" in problem for problem in problems)
    assert not any("offline" in problem for problem in problems)
