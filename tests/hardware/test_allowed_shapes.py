"""Machine shapes the real dumps here do not hold, each built as such a machine's dump lays
it out, with the facts stated as hwloc's default view states them: packages and nodes
that hold an allowed CPU or allowed memory, memory tiers read through their initiators,
trimmed sysfs, and sockets told apart by their sibling lists."""

from __future__ import annotations

from omni_cpu.hardware.probe import read_facts
from tests.helpers.machines import FakeMachine

GIB_KIB = 1024 * 1024
NODE = "/sys/devices/system/node"
TOPOLOGY = "/sys/devices/system/cpu/cpu{cpu}/topology"


def _cgroup2(machine: FakeMachine, cpus: str | None, mems: str) -> FakeMachine:
    """This process in cgroup2 /job with these effective cpus (None: unrestricted) and mems."""
    machine.cgroup2("/job", "cpuset")
    if cpus is not None:
        machine.write("/sys/fs/cgroup/job/cpuset.cpus.effective", cpus)
    return machine.write("/sys/fs/cgroup/job/cpuset.mems.effective", mems)


def _node_per_socket(machine: FakeMachine, sockets: int, cores: int) -> FakeMachine:
    machine.cpus(online=list(range(sockets * cores)), cores_per_socket=cores)
    for node in range(sockets):
        machine.node(node, f"{node * cores}-{node * cores + cores - 1}", memory_kib=16 * GIB_KIB)
    return machine.meminfo(total_kib=sockets * 16 * GIB_KIB, available_kib=sockets * GIB_KIB)


# -- 1. a cgroup that allows CPUs whose node's memory it does not allow ---------------


def test_cpus_on_node_0_with_mems_2_3_are_three_packages_and_two_nodes(machine):
    _cgroup2(_node_per_socket(machine, sockets=4, cores=8), "0-7", "2-3")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "0-7"
    assert facts.sockets == 3  # node 0's package for the CPUs, nodes 2 and 3's for memory
    assert facts.numa_node_count == 2  # node 0's memory is not this process's
    assert "memory outside cpuset.mems 0" in facts.numa_count_basis
    assert "holding allowed memory (nodes 2-3)" in facts.sockets_source
    assert facts.usable_memory_nodes() == (2, 3)


def test_cpus_of_four_nodes_one_offline_with_mems_shifted_by_one(machine):
    # 8 sockets, a node each; the cpuset allows nodes 0-3's CPUs (CPU 9 offline) and
    # the memory of nodes 1-4: packages 0-3 for the CPUs, 4 for node 4's memory.
    _node_per_socket(machine, sockets=8, cores=4)
    machine.cpus(online=[cpu for cpu in range(32) if cpu != 9], cores_per_socket=4)
    machine.write("/sys/devices/system/cpu/present", "0-31")
    _cgroup2(machine, "0-15", "1-4")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "0-8,10-15"
    assert (facts.sockets, facts.numa_node_count) == (5, 4)
    assert facts.host is not None and (facts.host.sockets, facts.host.numa_node_count) == (8, 8)


def test_a_node_whose_memory_is_allowed_but_whose_locality_spans_packages_adds_none(machine):
    # Memory-only node 2 is as near to both sockets' nodes: it sits in no package.
    _node_per_socket(machine, sockets=2, cores=4)
    machine.node(2, "", memory_kib=64 * GIB_KIB)
    for node, row in {0: "10 21 30", 1: "21 10 30", 2: "30 30 10"}.items():
        machine.write(f"{NODE}/node{node}/distance", row)
    _cgroup2(machine, "0-3", "2")
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.numa_node_count) == (1, 1)


# -- 2. memory tiers: CPU-only nodes, memory-only DRAM and NVM/CXL, a generic initiator --


def tiered_machine(machine: FakeMachine) -> FakeMachine:
    """2 sockets of 4 cores; CPU-only nodes 0-3 (a core pair each), generic initiator 4,
    DRAM nodes 5 (socket 0) and 6 (socket 1), NVM nodes 7 and 8, CXL node 9 (no HMAT)."""
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for node in range(4):
        machine.node(node, f"{node * 2}-{node * 2 + 1}", memory_kib=0)
    machine.node(4, "", memory_kib=0)
    tiers = {5: 32, 6: 32, 7: 256, 8: 256, 9: 512}
    for node, gib in tiers.items():
        machine.node(node, "", memory_kib=gib * GIB_KIB)
    machine.write(f"{NODE}/online", "0-9")
    machine.write(f"{NODE}/has_cpu", "0-3")
    machine.write(f"{NODE}/has_memory", "5-9")
    machine.write(f"{NODE}/has_normal_memory", "5-9")
    machine.write(f"{NODE}/has_generic_initiator", "4")
    # HMAT: access0 names the fastest initiator of any kind (the accelerator for DRAM 5),
    # access1 the fastest CPUs.
    for memory, cpu_nodes in {5: (0, 1), 6: (2, 3), 7: (0, 1), 8: (2, 3)}.items():
        for initiator in cpu_nodes:
            (
                machine.root / f"{NODE}/node{memory}/access1/initiators/node{initiator}".lstrip("/")
            ).mkdir(parents=True)
    (machine.root / f"{NODE}/node5/access0/initiators/node4".lstrip("/")).mkdir(parents=True)

    def distance(a: int, b: int) -> int:
        socket = {0: 0, 1: 0, 2: 1, 3: 1, 5: 0, 6: 1, 7: 0, 8: 1}
        if a == b:
            return 10
        if 4 in (a, b) or 9 in (a, b):
            return 30
        near = socket[a] == socket[b]
        tier = {5: 2, 6: 2, 7: 7, 8: 7}.get(a, 0) + {5: 2, 6: 2, 7: 7, 8: 7}.get(b, 0)
        return (11 if near else 21) + tier

    for node in range(10):
        machine.write(
            f"{NODE}/node{node}/distance", " ".join(str(distance(node, o)) for o in range(10))
        )
    # The kernel's top cpuset allows every node with memory: nodes 5-9.
    _cgroup2(machine, None, "5-9")
    return machine.meminfo(total_kib=1088 * GIB_KIB, available_kib=1000 * GIB_KIB)


def test_memory_tiers_count_the_memory_nodes_only_as_hwloc_does(machine):
    facts = read_facts(tiered_machine(machine).root)
    assert facts.online_cpus == "0-7"
    assert facts.numa_node_count == 5
    assert "memory outside cpuset.mems 0-3" in facts.numa_count_basis
    assert facts.sockets == 2


def test_the_cpu_initiators_of_access1_win_over_access0s_accelerator(machine):
    facts = read_facts(tiered_machine(machine).root)
    assert {n.id: n.initiators for n in facts.numa_nodes if n.id in (5, 6, 9)} == {
        5: (0, 1),
        6: (2, 3),
        9: (),
    }


# -- 3. trimmed sysfs: CPU directories for some CPUs, node lists for all -----------------


def _trimmed(machine: FakeMachine, online_file: str) -> FakeMachine:
    kept = [*range(16), *range(88, 104)]
    machine.cpus(online=kept, present=list(range(176)), cores_per_socket=88)
    machine.write("/sys/devices/system/cpu/online", online_file)
    machine.node(0, "0-87", memory_kib=64 * GIB_KIB).node(1, "88-175", memory_kib=64 * GIB_KIB)
    return machine.meminfo(total_kib=128 * GIB_KIB, available_kib=120 * GIB_KIB)


def test_a_trimmed_dump_whose_online_mask_names_every_cpu_reads_the_cpus_it_holds(machine):
    facts = read_facts(_trimmed(machine, "0-175").root)
    assert facts.online_cpus == "0-15,88-103"
    assert [(n.id, n.cpus) for n in facts.numa_nodes] == [(0, "0-15"), (1, "88-103")]
    assert (facts.sockets, facts.numa_node_count) == (2, 2)


def test_a_trimmed_dump_with_an_empty_online_mask_reads_its_cpu_directories(machine):
    _trimmed(machine, "")
    # cpuinfo kept the first 16 processors only
    machine.write("/proc/cpuinfo", "\n".join(f"processor\t: {cpu}\n" for cpu in range(16)))
    facts = read_facts(machine.root)
    assert facts.online_cpus == "0-15,88-103"
    assert (facts.sockets, facts.numa_node_count) == (2, 2)


# -- 4. sockets from odd sources ---------------------------------------------------------


def test_ia64_package_ids_repeating_over_single_core_packages_count_each_package(machine):
    # 16 single-core packages whose physical_package_id repeats in pairs.
    machine.cpus(online=list(range(16)), cores_per_socket=1)
    for cpu in range(16):
        machine.write(f"{TOPOLOGY.format(cpu=cpu)}/physical_package_id", str(cpu // 2))
    facts = read_facts(machine.root)
    assert facts.sockets == 16
    assert facts.sockets_source.startswith("package sibling lists")


def test_package_ids_that_disagree_with_the_sibling_lists_are_not_counted(machine):
    # Three packages of 4 CPUs by their sibling lists; ids split them four ways.
    machine.cpus(online=list(range(12)), cores_per_socket=4)
    for cpu in range(12):
        machine.write(f"{TOPOLOGY.format(cpu=cpu)}/physical_package_id", str(cpu // 3))
    assert read_facts(machine.root).sockets == 3


def test_a_machine_stating_no_package_at_all_counts_none(machine):
    # A PS3-like dump: two CPUs, cpuinfo, no topology directory at all.
    machine.write("/sys/devices/system/cpu/online", "0-1")
    machine.write("/sys/devices/system/cpu/possible", "0-1")
    machine.write(
        "/proc/cpuinfo",
        "processor\t: 0\ncpu\t\t: Cell Broadband Engine\n\n"
        "processor\t: 1\ncpu\t\t: Cell Broadband Engine\n",
    )
    facts = read_facts(machine.root)
    assert facts.sockets == 0
    assert facts.sockets_source.startswith("no package sibling list or id")


def test_package_ids_alone_still_count_where_no_cpu_states_a_sibling_list(machine):
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for cpu in range(8):
        for name in ("core_siblings_list",):
            (machine.root / f"{TOPOLOGY.format(cpu=cpu)}/{name}".lstrip("/")).unlink()
    facts = read_facts(machine.root)
    assert facts.sockets == 2
    assert facts.sockets_source.startswith("package ids")
