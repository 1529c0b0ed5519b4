"""Plans on machines whose CPUs and memory are apart: a cgroup that allows CPUs but not
their node's memory (every stage's memory is remote, stated and priced), and memory
tiers on memory-only nodes (never a home; the farther tiers named as slower memory)."""

from __future__ import annotations

from rich.console import Console

from omni_cpu.cli.render import profile_table
from omni_cpu.hardware.facts import MEMORY_ONLY
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import footprint_for_model, plan_profile
from omni_cpu.plan.fit import check_profile
from tests.helpers.machines import (
    FakeMachine,
    cgroup2_job,
    node_per_socket,
    tiered_memory_machine,
)

FOOTPRINT = footprint_for_model("0.6b")


def _split_plan(folder, mems: str):
    machine = FakeMachine(folder)
    facts = read_facts(cgroup2_job(node_per_socket(machine, sockets=4, cores=8), "0-7", mems).root)
    return facts, plan_profile(facts, FOOTPRINT)


def test_cpus_without_allowed_local_memory_plan_every_stage_remote(tmp_path):
    facts, profile = _split_plan(tmp_path, "2-3")
    [replica] = profile.replicas
    assert replica.numa_node == 0  # where its CPUs are, not node 2 whose CPUs it may not use
    assert {(s.numa_node, s.memory_nodes) for s in replica.stages} == {(0, "2")}
    remote = [note for note in profile.notes if "has no local memory" in note]
    assert len(remote) == 2  # one line per stage
    assert all("remote on node(s) 2, SLIT distance 20" in note for note in remote)
    assert check_profile(profile, facts, FOOTPRINT) == []


def test_remote_memory_is_priced_into_the_talker_step(tmp_path):
    _, remote = _split_plan(tmp_path / "remote", "2-3")
    _, local = _split_plan(tmp_path / "local", "0")
    remote_step = remote.replicas[0].capacity.talker_step_ms
    local_step = local.replicas[0].capacity.talker_step_ms
    assert remote_step > local_step
    [note] = [n for n in remote.notes if "predicted talker step" in n]
    assert f"{remote_step:.1f} ms against {local_step:.1f} ms" in note
    assert not any("has no local memory" in n for n in local.notes)


def test_the_plan_table_marks_remote_memory(tmp_path):
    _, profile = _split_plan(tmp_path, "2-3")
    console = Console(width=120, record=True)
    console.print(profile_table(profile))
    rows = [line for line in console.export_text().splitlines() if "talker" in line]
    assert rows and all("2 remote" in row for row in rows)


def test_memory_tiers_never_home_a_replica_and_bind_the_nearest_dram(tmp_path):
    facts = read_facts(tiered_memory_machine(FakeMachine(tmp_path)).root)
    profile = plan_profile(facts, FOOTPRINT)
    memory_only = {node.id for node in facts.numa_nodes if node.kind == MEMORY_ONLY}
    assert not {replica.numa_node for replica in profile.replicas} & memory_only
    assert [r.numa_node for r in profile.replicas] == [0, 2]
    bound = [{s.memory_nodes for s in r.stages} for r in profile.replicas]
    assert bound == [{"5"}, {"6"}]  # each socket's DRAM, not its NVM or the CXL node
    assert any("memory-only nodes 7-9 are farther memory tiers" in n for n in profile.notes)
    assert check_profile(profile, facts, FOOTPRINT) == []


def test_memtotal_of_nodes_outside_the_view_does_not_scale_the_allowed_nodes(tmp_path):
    # MemTotal holds all four 16 GiB nodes; the view lists three of them: still 16 GiB each.
    _, profile = _split_plan(tmp_path, "2-3")
    assert not any("node memory scaled" in note for note in profile.notes)


def test_the_chunk_schedule_is_fitted_to_the_remote_talker_step(tmp_path):
    _, profile = _split_plan(tmp_path, "2-3")
    step = profile.replicas[0].capacity.talker_step_ms
    [schedule] = [note for note in profile.notes if note.startswith("chunks of")]
    assert f"makes a frame every {step:.0f} ms" in schedule
