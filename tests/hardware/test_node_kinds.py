"""What each NUMA node is, from what sysfs says (has_memory, has_normal_memory,
has_generic_initiator, access classes, distances), and what the plan makes of it:
only nodes with memory are homes, memoryless CPU nodes take their nearest memory,
a node listed twice is one node."""

from __future__ import annotations

from omni_cpu.hardware.facts import (
    CPUS_AND_MEMORY,
    CPUS_ONLY,
    DEVICE_MEMORY,
    GENERIC_INITIATOR,
    MEMORY_ONLY,
)
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import footprint_for_model, plan_profile
from tests.helpers.machines import FakeMachine

GIB_KIB = 1024 * 1024
FOOTPRINT = footprint_for_model("0.6b")
NODE = "/sys/devices/system/node"


def _distances(machine: FakeMachine, rows: dict[int, list[int]]) -> None:
    for node, row in rows.items():
        machine.write(f"{NODE}/node{node}/distance", " ".join(map(str, row)))


def test_memoryless_cpu_node_takes_its_nearest_memory_node(machine):
    # Node 1's CPUs have no memory of their own; memory-only node 2 is nearer than node 0.
    machine.cpus(online=list(range(8)))
    machine.node(0, "0-3", memory_kib=32 * GIB_KIB).node(1, "4-7", memory_kib=0)
    machine.node(2, "", memory_kib=32 * GIB_KIB)
    machine.write(f"{NODE}/has_memory", "0,2")
    machine.write(f"{NODE}/has_normal_memory", "0,2")
    _distances(machine, {0: [10, 20, 20], 1: [20, 10, 12], 2: [20, 12, 10]})
    machine.meminfo(total_kib=64 * GIB_KIB, available_kib=60 * GIB_KIB)
    facts = read_facts(machine.root)
    assert [n.kind for n in facts.numa_nodes] == [CPUS_AND_MEMORY, CPUS_ONLY, MEMORY_ONLY]
    profile = plan_profile(facts, FOOTPRINT)
    homes = {r.stage(0).cpus: r.stage(0).memory_nodes for r in profile.replicas}
    assert homes == {"0-2": "0", "4-6": "2"}


def test_gpu_memory_nodes_are_device_memory_not_homes_and_not_counted(machine):
    # A POWER9 + V100 box: CPU nodes 0 and 8, the GPUs' memory onlined as nodes 250-255,
    # all of it ZONE_MOVABLE (in has_memory, not in has_normal_memory).
    machine.cpus(online=list(range(16)))
    machine.node(0, "0-7", memory_kib=128 * GIB_KIB).node(8, "8-15", memory_kib=128 * GIB_KIB)
    for gpu in range(250, 256):
        machine.node(gpu, "", memory_kib=16 * GIB_KIB)
    machine.write(f"{NODE}/has_memory", "0,8,250-255")
    machine.write(f"{NODE}/has_normal_memory", "0,8")
    machine.meminfo(total_kib=352 * GIB_KIB, available_kib=340 * GIB_KIB)
    facts = read_facts(machine.root)
    assert [n.kind for n in facts.numa_nodes if n.id >= 250] == [DEVICE_MEMORY] * 6
    assert facts.numa_node_count == 2
    assert "device memory 250-255" in facts.numa_count_basis
    assert facts.usable_memory_nodes() == (0, 8)
    profile = plan_profile(facts, FOOTPRINT)
    assert sorted(r.numa_node for r in profile.replicas) == [0, 8]
    assert {s.memory_nodes for r in profile.replicas for s in r.stages} == {"0", "8"}


def test_a_generic_initiator_without_memory_is_not_counted(machine):
    machine.cpus(online=list(range(4)))
    machine.node(0, "0-3", memory_kib=16 * GIB_KIB).node(1, "", memory_kib=0)
    machine.write(f"{NODE}/has_memory", "0")
    machine.write(f"{NODE}/has_generic_initiator", "1")
    facts = read_facts(machine.root)
    assert facts.numa_nodes[1].kind == GENERIC_INITIATOR
    assert facts.numa_node_count == 1
    assert "generic initiators without memory 1" in facts.numa_count_basis


def test_hmat_access_class_initiators_are_read_per_node(machine):
    machine.cpus(online=list(range(4)))
    machine.node(0, "0-3", memory_kib=16 * GIB_KIB).node(1, "", memory_kib=64 * GIB_KIB)
    (machine.root / NODE.lstrip("/") / "node1/access0/initiators/node0").mkdir(parents=True)
    facts = read_facts(machine.root)
    assert facts.numa_nodes[1].initiators == (0,)
    assert facts.numa_nodes[1].kind == MEMORY_ONLY


def test_firmware_listing_one_node_eight_times_is_one_node_with_all_its_memory(machine):
    # The same CPUs and the same 15.6 GiB in nodes 0-7: one node, not eight of 2 GiB.
    machine.cpus(online=list(range(4)))
    memory_kib = int(15.6 * GIB_KIB)
    for node in range(8):
        machine.node(node, "0-3", memory_kib=memory_kib)
    machine.meminfo(total_kib=memory_kib, available_kib=memory_kib - GIB_KIB)
    facts = read_facts(machine.root)
    assert [n.duplicate_of for n in facts.numa_nodes] == [None] + [0] * 7
    assert facts.numa_node_count == 1
    assert any("repeat node 0" in note for note in facts.notes)
    [replica] = plan_profile(facts, FOOTPRINT).replicas
    assert {(s.numa_node, s.memory_nodes) for s in replica.stages} == {(0, "0")}
    # Planned as the same box listing its node once.
    for node in range(1, 8):
        for name in ("cpulist", "meminfo"):
            (machine.root / NODE.lstrip("/") / f"node{node}" / name).unlink()
    [once] = plan_profile(read_facts(machine.root), FOOTPRINT).replicas
    assert replica.stages == once.stages


def test_nodes_on_different_cpus_with_equal_memory_are_not_duplicates(machine):
    machine.cpus(online=list(range(8)))
    machine.node(0, "0-3", memory_kib=16 * GIB_KIB).node(1, "4-7", memory_kib=16 * GIB_KIB)
    facts = read_facts(machine.root)
    assert [n.duplicate_of for n in facts.numa_nodes] == [None, None]
    assert facts.numa_node_count == 2


def test_a_dump_without_node_masks_counts_every_node_with_cpus(machine):
    machine.cpus(online=list(range(8)))
    machine.node(0, "0-3").node(2, "4-7")
    facts = read_facts(machine.root)
    assert [n.kind for n in facts.numa_nodes] == [CPUS_AND_MEMORY, CPUS_AND_MEMORY]
    assert (facts.numa_node_count, facts.numa_count_basis) == (2, "nodes holding CPUs or memory")


def test_repeated_nodes_without_meminfo_leave_the_box_all_of_memtotal(machine):
    # Eight nodes naming CPUs 0-3 and no node meminfo: one node holding all 15.6 GiB
    # (not an eighth of MemTotal each).
    machine.cpus(online=list(range(4)))
    for node in range(8):
        machine.write(f"{NODE}/node{node}/cpulist", "0-3")
    memory_kib = int(15.6 * GIB_KIB)
    machine.meminfo(total_kib=memory_kib, available_kib=memory_kib - GIB_KIB)
    facts = read_facts(machine.root)
    assert facts.numa_node_count == 1
    [replica] = plan_profile(facts, FOOTPRINT).replicas
    assert replica.stage(0).memory_nodes == "0"
    assert not any("gives it" in note for note in facts.notes)


def test_cpu_less_nodes_that_state_no_memory_are_not_counted(machine):
    # A dump that kept only cpumaps: the GPUs' nodes 250-255 name no CPUs and no memory.
    machine.cpus(online=list(range(8)))
    machine.write(f"{NODE}/node0/cpumap", "0f").write(f"{NODE}/node8/cpumap", "f0")
    for gpu in range(250, 256):
        machine.write(f"{NODE}/node{gpu}/cpumap", "00")
    facts = read_facts(machine.root)
    assert facts.numa_node_count == 2
    assert "no CPUs and no stated memory 250-255" in facts.numa_count_basis
    assert sorted(r.numa_node for r in plan_profile(facts, FOOTPRINT).replicas) == [0, 8]
