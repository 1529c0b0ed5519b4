"""Machine shapes the real dumps here do not hold, each built as such a machine's dump lays
it out, with the facts stated as hwloc's default view states them: packages and nodes
that hold an allowed CPU or allowed memory, memory tiers read through their initiators,
trimmed sysfs, and sockets told apart by their sibling lists."""

from __future__ import annotations

from omni_cpu.hardware.facts import NVM
from omni_cpu.hardware.probe import read_facts
from tests.helpers.machines import (
    FakeMachine,
    cgroup1_job,
    cgroup2_job,
    every_node_lists_every_cpu,
    node_per_socket,
    nvm_tiered_machine,
    s390_lpar,
    tiered_memory_machine,
)

GIB_KIB = 1024 * 1024
NODE = "/sys/devices/system/node"
TOPOLOGY = "/sys/devices/system/cpu/cpu{cpu}/topology"


# -- 1. a cgroup that allows CPUs whose node's memory it does not allow ---------------


def test_cpus_on_node_0_with_mems_2_3_are_three_packages_and_two_nodes(machine):
    cgroup2_job(node_per_socket(machine, sockets=4, cores=8), "0-7", "2-3")
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
    node_per_socket(machine, sockets=8, cores=4)
    machine.cpus(online=[cpu for cpu in range(32) if cpu != 9], cores_per_socket=4)
    machine.write("/sys/devices/system/cpu/present", "0-31")
    cgroup2_job(machine, "0-15", "1-4")
    facts = read_facts(machine.root)
    assert facts.online_cpus == "0-8,10-15"
    assert (facts.sockets, facts.numa_node_count) == (5, 4)
    assert facts.host is not None and (facts.host.sockets, facts.host.numa_node_count) == (8, 8)


def test_a_node_whose_memory_is_allowed_but_whose_locality_spans_packages_adds_none(machine):
    # Memory-only node 2 is as near to both sockets' nodes: it sits in no package.
    node_per_socket(machine, sockets=2, cores=4)
    machine.node(2, "", memory_kib=64 * GIB_KIB)
    for node, row in {0: "10 21 30", 1: "21 10 30", 2: "30 30 10"}.items():
        machine.write(f"{NODE}/node{node}/distance", row)
    cgroup2_job(machine, "0-3", "2")
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.numa_node_count) == (1, 1)


# -- 2. memory tiers: CPU-only nodes, memory-only DRAM and NVM/CXL, a generic initiator --


def test_memory_tiers_count_the_memory_nodes_only_as_hwloc_does(machine):
    facts = read_facts(tiered_memory_machine(machine).root)
    assert facts.online_cpus == "0-7"
    assert facts.numa_node_count == 5
    assert "memory outside cpuset.mems 0-3" in facts.numa_count_basis
    assert facts.sockets == 2


def test_the_cpu_initiators_of_access1_win_over_access0s_accelerator(machine):
    facts = read_facts(tiered_memory_machine(machine).root)
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


def _packages_with_ids(machine: FakeMachine, cpus: int, per_package: int, ids_per: int):
    """Packages of `per_package` CPUs by their sibling lists, whose ids change every `ids_per`."""
    machine.cpus(online=list(range(cpus)), cores_per_socket=per_package)
    for cpu in range(cpus):
        machine.write(f"{TOPOLOGY.format(cpu=cpu)}/physical_package_id", str(cpu // ids_per))
    return read_facts(machine.root)


def test_ia64_package_ids_repeating_over_single_core_packages_count_each_package(machine):
    # 16 single-core packages whose physical_package_id repeats in pairs.
    facts = _packages_with_ids(machine, cpus=16, per_package=1, ids_per=2)
    assert facts.sockets == 16
    assert facts.sockets_source.startswith("package sibling lists")


def test_package_ids_that_disagree_with_the_sibling_lists_are_not_counted(machine):
    # Three packages of 4 CPUs by their sibling lists; ids split them four ways.
    assert _packages_with_ids(machine, cpus=12, per_package=4, ids_per=3).sockets == 3


def test_a_cpu_whose_sibling_list_conflicts_with_its_packages_is_counted_in_the_one_holding_it(
    machine,
):
    # Two packages of 4; CPU 5's list names only 4-5 (a conflicting dump): hwloc makes a
    # package of the set each package's first CPU states, so still two.
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    machine.write(f"{TOPOLOGY.format(cpu=5)}/core_siblings_list", "4-5")
    assert read_facts(machine.root).sockets == 2


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
        (machine.root / f"{TOPOLOGY.format(cpu=cpu)}/core_siblings_list".lstrip("/")).unlink()
    facts = read_facts(machine.root)
    assert facts.sockets == 2
    assert facts.sockets_source.startswith("package ids")


def test_a_node_directory_the_online_mask_leaves_out_is_no_node(machine):
    node_per_socket(machine, sockets=2, cores=4)
    machine.node(2, "", memory_kib=8 * GIB_KIB)  # a stale directory of a node gone offline
    machine.write(f"{NODE}/online", "0-1")
    facts = read_facts(machine.root)
    assert [node.id for node in facts.numa_nodes] == [0, 1]
    assert facts.numa_node_count == 2


# -- 5. issue 48's shapes: each as hwloc's default view reads it --------------------------


def test_nodes_whose_memory_cpuset_mems_forbids_are_not_listed(machine):
    # CPUs of node 0 only, memory of nodes 2-3: hwloc's view holds nodes 2 and 3 alone.
    cgroup2_job(node_per_socket(machine, sockets=4, cores=8, node_gib=8), "0-7", "2-3")
    facts = read_facts(machine.root)
    assert [node.id for node in facts.numa_nodes] == [2, 3]
    assert facts.numa_node_count == 2
    assert {cpu.node for cpu in facts.cpus} == {0}  # where the kernel puts them


def test_cpu_only_nodes_are_not_listed_and_dax_kmem_nvm_nodes_count_as_nvm(machine):
    facts = read_facts(nvm_tiered_machine(machine).root)
    assert [node.id for node in facts.numa_nodes] == [5, 6, 7, 8, 9]
    assert {node.id: node.kind for node in facts.numa_nodes if node.id in (7, 8)} == {
        7: NVM,
        8: NVM,
    }
    assert facts.numa_node_count == 5
    assert facts.sockets == 2


def test_firmware_whose_every_node_lists_every_cpu_is_one_node(machine):
    # Eight nodes of slightly different sizes, each naming CPUs 0-7: hwloc keeps node 0.
    every_node_lists_every_cpu(machine, [2.0, 1.9, 2.1, 1.8, 2.2, 1.85, 1.95, 2.05])
    facts = read_facts(machine.root)
    assert facts.numa_node_count == 1
    assert [node.overlaps for node in facts.numa_nodes] == [None] + [0] * 7
    assert any("buggy firmware" in note for note in facts.notes)


def test_cgroup_v1_reads_cpuset_cpus_and_mems_not_their_effective_lists(machine):
    # hwloc reads v1's cpuset.cpus / cpuset.mems (offline CPUs are dropped anyway).
    node_per_socket(machine, sockets=2, cores=16)
    cgroup1_job(machine, "0-31", "0-1", effective_cpus="0-15", effective_mems="0")
    facts = read_facts(machine.root)
    assert (facts.online_cpus, facts.sockets, facts.numa_node_count) == ("0-31", 2, 2)


def test_s390_without_package_ids_counts_its_core_sibling_groups_as_sockets(machine):
    facts = read_facts(s390_lpar(machine, sockets=8, cores=2).root)
    assert facts.architecture == "s390x"
    assert facts.sockets == 8
    assert facts.sockets_source.startswith("package sibling lists")
