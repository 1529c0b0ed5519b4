"""Where replicas live, on synthetic sysroots: grouped nodes, memoryless and memory-only
nodes, cpuset.mems, CPU quotas, and the one-line refusal of a machine too small."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import MachineTooSmallError, footprint_for_model, plan_profile
from omni_cpu.plan.fit import check_profile
from omni_cpu.profile import dump_profile, parse_profile
from omni_cpu.profile.deploy import stage_env
from tests.helpers.machines import GIB, FakeMachine, machine

FOOTPRINT = footprint_for_model("0.6b")
GIB_KIB = 1024 * 1024


def numa_machine(root, nodes: dict[int, tuple[str, float]], distance=None) -> FakeMachine:
    """Node id -> (cpu list, memory GiB); `distance(a, b)` fills the SLIT rows."""
    machine = FakeMachine(root)
    cpus = sorted({c for cpus, _ in nodes.values() for c in parse_cpu_list(cpus)})
    machine.cpus(online=cpus)
    for node, (node_cpus, gib) in nodes.items():
        machine.node(node, node_cpus, memory_kib=int(gib * GIB_KIB))
        if distance is not None:
            row = " ".join(str(distance(node, other)) for other in sorted(nodes))
            machine.write(f"/sys/devices/system/node/node{node}/distance", row)
    total = sum(gib for _, gib in nodes.values())
    machine.meminfo(total_kib=int(total * GIB_KIB), available_kib=int(total * GIB_KIB))
    machine.write(
        "/sys/devices/system/node/has_memory",
        ",".join(str(n) for n, (_, gib) in sorted(nodes.items()) if gib),
    )
    return machine


def test_64_nodes_of_5_gib_are_planned_as_grouped_replicas_of_the_nearest_nodes(tmp_path):
    # Node n's nearest neighbour is n ^ 32 (not n + 1): grouping follows the table.
    nodes = {n: (f"{2 * n}-{2 * n + 1}", 5) for n in range(64)}
    root = numa_machine(
        tmp_path, nodes, lambda a, b: 10 if a == b else 12 if a ^ 32 == b else 20
    ).root
    facts = read_facts(root)
    profile = plan_profile(facts, FOOTPRINT)
    assert len(profile.replicas) == 32
    groups = {tuple(parse_cpu_list(r.stages[0].memory_nodes)) for r in profile.replicas}
    assert groups == {(n, n + 32) for n in range(32)}
    assert any("form one replica" in note for note in profile.notes)
    assert check_profile(profile, facts, FOOTPRINT) == []
    env = stage_env(profile, 0, 0)
    assert env["CPU_VISIBLE_MEMORY_NODES"] == "0,32"


def test_eight_5_gib_nodes_pair_up_without_a_distance_table(tmp_path):
    nodes = {n: (f"{4 * n}-{4 * n + 3}", 5) for n in range(8)}
    profile = plan_profile(read_facts(numa_machine(tmp_path, nodes).root), FOOTPRINT)
    assert [r.stages[0].memory_nodes for r in profile.replicas] == ["0-1", "2-3", "4-5", "6-7"]


def test_an_8_gib_machine_holds_one_0_6b_replica_with_one_stream(tmp_path):
    facts = read_facts(numa_machine(tmp_path, {0: ("0-1", 8)}).root)
    profile = plan_profile(facts, FOOTPRINT)
    [replica] = profile.replicas
    assert replica.stage(0).max_num_seqs >= 1
    assert check_profile(profile, facts, FOOTPRINT) == []


def test_nodes_big_enough_stay_one_replica_each(tmp_path):
    nodes = {0: ("0-3", 32), 1: ("4-7", 32)}
    profile = plan_profile(read_facts(numa_machine(tmp_path, nodes).root), FOOTPRINT)
    assert [r.stages[0].memory_nodes for r in profile.replicas] == ["0", "1"]


def test_cpus_of_a_memoryless_node_use_the_nearest_memory_node(tmp_path):
    nodes = {0: ("0-3", 32), 1: ("4-7", 32), 2: ("8-11", 0)}
    distance = {(2, 0): 30, (2, 1): 15}
    root = numa_machine(
        tmp_path,
        nodes,
        lambda a, b: 10 if a == b else distance.get((a, b), distance.get((b, a), 20)),
    ).root
    facts = read_facts(root)
    profile = plan_profile(facts, FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [0, 1]
    replica = profile.replicas[1]
    bound = {cpu for s in replica.stages for cpu in parse_cpu_list(s.cpus)}
    assert bound & set(range(8, 12))  # node 2's cores work for node 1's replica
    assert all(s.memory_nodes == "1" for s in replica.stages)
    assert check_profile(profile, facts, FOOTPRINT) == []


def test_memory_only_and_gpu_memory_nodes_are_never_a_replica_home(tmp_path):
    # Node 1: CXL memory; node 2: GPU memory (a generic initiator): no CPUs either.
    machine = numa_machine(tmp_path, {0: ("0-3", 32), 1: ("", 256), 2: ("", 96)})
    machine.write("/sys/devices/system/node/has_generic_initiator", "2")
    profile = plan_profile(read_facts(machine.root), FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [0]
    assert {s.memory_nodes for s in profile.replicas[0].stages} == {"0"}


def test_cpuset_mems_restricts_where_replica_memory_comes_from(tmp_path):
    machine = numa_machine(tmp_path, {0: ("0-3", 32), 1: ("4-7", 32)})
    machine.write("/proc/self/cgroup", "0::/job\n")
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpuset")
    machine.write("/sys/fs/cgroup/job/cpuset.mems.effective", "1")
    facts = read_facts(machine.root)
    profile = plan_profile(facts, FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [1]
    assert {s.memory_nodes for r in profile.replicas for s in r.stages} == {"1"}
    assert check_profile(profile, facts, FOOTPRINT) == []


def test_cpu_quota_caps_the_cores_each_replica_binds(tmp_path):
    machine = numa_machine(tmp_path, {0: ("0-7", 32), 1: ("8-15", 32)})
    machine.write("/proc/self/cgroup", "0::/pod\n")
    machine.write("/sys/fs/cgroup/cgroup.controllers", "cpu")
    machine.write("/sys/fs/cgroup/pod/cpu.max", "400000 100000")
    profile = plan_profile(read_facts(machine.root), FOOTPRINT)
    for replica in profile.replicas:
        bound = {cpu for s in replica.stages for cpu in parse_cpu_list(s.cpus)}
        bound |= set(parse_cpu_list(replica.frontend_cpus))
        assert len(bound) <= 2
    assert any("cpu.max" in note for note in profile.notes)


def test_4_gib_machine_is_refused_in_one_line_naming_the_memory_needed(tmp_path):
    facts = read_facts(numa_machine(tmp_path, {0: ("0-3", 4)}).root)
    with pytest.raises(MachineTooSmallError) as refused:
        plan_profile(facts, FOOTPRINT)
    line = refused.value.one_line()
    assert "\n" not in line
    assert "needs about 4.5 GiB" in line and "gives it 3.0 GiB" in line
    assert "--weights int8" in line  # what was tried, and why it does not fit either


def test_1_7b_on_a_machine_that_holds_0_6b_says_what_would_fit(tmp_path):
    facts = read_facts(numa_machine(tmp_path, {0: ("0-3", 7)}).root)
    with pytest.raises(MachineTooSmallError) as refused:
        plan_profile(facts, footprint_for_model("1.7b"))
    assert "would fit: --weights int8" in refused.value.one_line()
    assert "--model 0.6b" in refused.value.one_line()


def test_probe_exit_codes_say_planned_too_small_or_unreadable(tmp_path):
    def probe(root) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )

    planned = probe(numa_machine(tmp_path / "big", {0: ("0-3", 32)}).root)
    small = probe(numa_machine(tmp_path / "small", {0: ("0-3", 4)}).root)
    (tmp_path / "empty").mkdir()
    unreadable = probe(tmp_path / "empty")
    assert (planned.returncode, small.returncode, unreadable.returncode) == (0, 5, 6)
    assert '"facts"' in small.stdout  # the facts print either way
    assert len(small.stderr.strip().splitlines()) == 1


def test_unequal_nodes_keep_each_replicas_numbers_through_a_round_trip(tmp_path):
    facts = read_facts(numa_machine(tmp_path, {0: ("0-3", 64), 1: ("4-7", 8)}).root)
    profile = plan_profile(facts, FOOTPRINT)
    kv = [r.stages[0].kv_cache_memory_bytes for r in profile.replicas]
    assert kv[0] > kv[1]
    loaded = parse_profile(dump_profile(profile))
    assert loaded == profile
    assert [r.stages[0].kv_cache_memory_bytes for r in loaded.replicas] == kv


def test_unreadable_cpuinfo_plans_float32_with_a_note_not_silently(tmp_path):
    machine = numa_machine(tmp_path, {0: ("0-3", 32)})
    machine.write("/proc/cpuinfo", "\x00\x00")
    machine.write("/proc/sys/kernel/arch", "x86_64")
    profile = plan_profile(read_facts(machine.root), FOOTPRINT)
    assert profile.dtype == "float32"
    assert any("--dtype bfloat16" in note for note in profile.notes)
    assert any("/proc/cpuinfo is unreadable" in note for note in profile.notes)


def test_a_machine_whose_every_node_is_too_small_spans_its_nearest_nodes(tmp_path):
    # 12 GiB in all, no 3 GiB node holds the talker: it spans nearest nodes (0-2, 1-3),
    # its memory interleaved over them, and the table says so.
    nodes = {n: (f"{2 * n}-{2 * n + 1}", 3.0) for n in range(4)}
    near = {(0, 2), (2, 0), (1, 3), (3, 1)}
    root = numa_machine(
        tmp_path, nodes, lambda a, b: 10 if a == b else 12 if (a, b) in near else 30
    ).root
    profile = plan_profile(read_facts(root), FOOTPRINT)
    assert all(replica.spanning for replica in profile.replicas)
    assert sorted(r.stage(0).memory_nodes for r in profile.replicas) == ["0,2", "1,3"]
    talker = stage_env(profile, 0, 0)
    assert talker["OMNI_CPU_INTERLEAVE_MEMORY"] == "1"
    assert "OMNI_CPU_INTERLEAVE_MEMORY" not in stage_env(profile, 0, 1)
    assert parse_profile(dump_profile(profile)) == profile
    assert any("spanning replica" in note for note in profile.notes)
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "spanning" in done.stdout


def test_nodes_that_each_hold_the_talker_are_never_spanned(tmp_path):
    nodes = {n: (f"{4 * n}-{4 * n + 3}", 8) for n in range(2)}
    profile = plan_profile(read_facts(numa_machine(tmp_path, nodes).root), FOOTPRINT)
    assert [r.spanning for r in profile.replicas] == [False, False]
    assert all("OMNI_CPU_INTERLEAVE_MEMORY" not in stage_env(profile, r.index, 0)
               for r in profile.replicas)  # fmt: skip


def test_a_machine_too_small_in_all_is_refused_with_exit_5_in_one_line(tmp_path):
    nodes = {n: (f"{2 * n}-{2 * n + 1}", 1) for n in range(2)}
    root = numa_machine(tmp_path, nodes).root
    with pytest.raises(MachineTooSmallError) as refused:
        plan_profile(read_facts(root), FOOTPRINT)
    assert "for one replica" in refused.value.one_line()
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 5
    assert len(done.stderr.strip().splitlines()) == 1
    assert "this machine's memory gives it" in done.stderr


def test_a_gpu_memory_node_is_not_a_home_where_the_cpu_nodes_memory_is_unknown(tmp_path):
    # Node 0's meminfo is missing; node 1 is 96 GiB of a GPU's memory, in MemTotal too.
    machine = FakeMachine(tmp_path).cpus(online=list(range(8)))
    machine.node(0, "0-7").node(1, "", memory_kib=96 * GIB_KIB)
    (machine.root / "sys/devices/system/node/node0/meminfo").unlink()
    machine.meminfo(total_kib=104 * GIB_KIB, available_kib=100 * GIB_KIB)
    profile = plan_profile(read_facts(machine.root), FOOTPRINT)
    [replica] = profile.replicas
    assert replica.numa_node == 0
    assert {s.memory_nodes for s in replica.stages} == {"0"}
    # Node 0 has what MemTotal leaves after the GPU's 96 GiB: 8 GiB, not 52.
    assert replica.stage(0).kv_cache_memory_bytes < 3 * 1024**3


def test_the_1_7b_model_on_8_nodes_of_5_gib_spans_pairs_instead_of_refusing():
    # No 5 GiB node holds the 1.7B talker; every pair of nodes holds a replica.
    facts = machine({n: [2 * n, 2 * n + 1] for n in range(8)}, memory_per_node=5 * GIB)
    profile = plan_profile(facts, footprint_for_model("1.7b"))
    assert len(profile.replicas) == 4
    assert all(replica.spanning for replica in profile.replicas)
    assert all(len(replica.stage(0).memory_node_ids()) == 2 for replica in profile.replicas)
