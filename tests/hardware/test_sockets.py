"""Sockets are one number: the distinct package ids, and where an id is -1 or missing
the distinct core_siblings sets (the kernel's CPUs of one package). A hybrid
machine's per-core-type counts sit in their own field."""

from __future__ import annotations

from omni_cpu.hardware.probe import read_facts
from tests.helpers.machines import FakeMachine

TOPOLOGY = "/sys/devices/system/cpu/cpu{cpu}/topology"


def _no_package_ids(machine: FakeMachine, cpus: range) -> None:
    for cpu in cpus:
        machine.write(f"{TOPOLOGY.format(cpu=cpu)}/physical_package_id", "-1")


def test_package_ids_of_minus_one_count_the_core_siblings_sets(machine):
    # An s390 guest without books: ids -1, two packages of 4 CPUs by their sibling lists.
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    _no_package_ids(machine, range(8))
    facts = read_facts(machine.root)
    assert facts.sockets == 2
    assert facts.cores_per_socket == 4


def test_missing_package_ids_count_the_core_siblings_sets(machine):
    machine.cpus(online=list(range(6)), cores_per_socket=2)
    for cpu in range(6):
        (machine.root / TOPOLOGY.format(cpu=cpu).lstrip("/") / "physical_package_id").unlink()
    assert read_facts(machine.root).sockets == 3


def test_a_hybrid_arm_box_in_one_package_has_one_socket_and_a_per_type_breakdown(machine):
    # Two core types (Cortex-A55 LITTLE, Cortex-A76 big), one package id, clusters stated.
    machine.write("/sys/devices/system/cpu/online", "0-7")
    machine.write("/sys/devices/system/cpu/possible", "0-7")
    blocks = []
    for cpu in range(8):
        big = cpu >= 4
        base = TOPOLOGY.format(cpu=cpu)
        machine.write(f"{base}/physical_package_id", "0")
        machine.write(f"{base}/cluster_id", "1" if big else "0")
        machine.write(f"{base}/core_id", str(cpu))
        machine.write(f"{base}/thread_siblings_list", str(cpu))
        machine.write(f"{base}/core_siblings_list", "4-7" if big else "0-3")
        machine.write(f"{base}/package_cpus_list", "0-7")
        blocks.append(
            f"processor\t: {cpu}\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU part\t: {'0xd0b' if big else '0xd05'}\n"
        )
    machine.write("/proc/cpuinfo", "\n".join(blocks))
    facts = read_facts(machine.root)
    assert len(facts.core_types) == 2
    assert facts.sockets == 1
    assert facts.sockets_by_core_type == [1, 1]


def test_a_uniform_machine_has_no_per_type_breakdown(machine):
    machine.cpus(online=list(range(8)), threads_per_core=2, cores_per_socket=2)
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.sockets_by_core_type) == (2, None)


def test_cpus_without_thread_sibling_lists_are_cores_so_cores_per_socket_is_never_0(machine):
    # Some dumps (fake NUMA, trimmed copies) lack thread_siblings but state core ids.
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    for cpu in range(8):
        (machine.root / TOPOLOGY.format(cpu=cpu).lstrip("/") / "thread_siblings_list").unlink()
    facts = read_facts(machine.root)
    assert (facts.sockets, facts.cores_per_socket, facts.threads_per_core) == (2, 4, 1)


def test_sockets_is_one_number_or_unknown_on_every_real_dump(dump, dump_facts):
    assert dump_facts.sockets is None or isinstance(dump_facts.sockets, int)
    if isinstance(dump.expected["sockets"], int):
        assert dump_facts.sockets == dump.expected["sockets"]


def test_the_host_of_every_real_dump_names_its_online_cpus_and_nodes(dump, dump_facts):
    assert dump_facts.host is not None
    assert dump_facts.host.online_cpus == dump_facts.online_cpus  # no cgroup in the dumps
    assert dump_facts.numa_node_count >= 1
    assert dump_facts.numa_count_basis


def test_schema_2_facts_with_per_type_sockets_still_load(machine):
    from omni_cpu.hardware.facts import Facts

    machine.cpus(online=list(range(4))).node(0, "0-3")
    saved = read_facts(machine.root).to_dict()
    for key in ("host", "numa_node_count", "numa_count_basis", "sockets_by_core_type"):
        del saved[key]
    saved |= {"schema_version": 2, "sockets": [1, 1]}
    for node in saved["numa_nodes"]:
        for key in ("kind", "normal_memory", "initiators", "duplicate_of"):
            del node[key]
    loaded = Facts.from_dict(saved)
    assert (loaded.sockets, loaded.sockets_by_core_type) == (1, [1, 1])
    assert loaded.numa_node_count == 1 and loaded.host is None


def test_a_package_id_missing_on_some_cpus_does_not_count_their_package_twice(machine):
    machine.cpus(online=list(range(8)), cores_per_socket=4)
    _no_package_ids(machine, range(4, 8))  # CPUs 4-7 are package 1 by their sibling list
    assert read_facts(machine.root).sockets == 2
