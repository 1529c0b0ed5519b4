"""One edit moves a stage (schema 5): its node, memory nodes and replica home follow its
`cpus`; and a machine that numbers CPUs across nodes gets each stage on one node's cores."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.bind import bind_profile
from omni_cpu.plan.resolve import resolve
from omni_cpu.profile import dump_profile, parse_profile, stage_env
from omni_cpu.profile.model import Profile
from tests.helpers.machines import machine

FOOTPRINT = footprint_for_model("0.6b")
TWO_NODES = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


def one_replica(facts: Facts) -> Profile:
    """The plan of `facts` with its first replica only (the other node's cores free)."""
    profile = plan_profile(facts, FOOTPRINT, PlanOptions())
    return dataclasses.replace(profile, replicas=profile.replicas[:1])


def nodes_of(cpus: frozenset[int], facts: Facts) -> set[int]:
    node_of = facts.node_of_cpu()
    return {node_of[cpu] for cpu in cpus}


def test_a_stage_edited_onto_another_node_s_cores_validates_and_binds_with_no_other_edit(
    tmp_path: Path,
):
    facts = machine(TWO_NODES)
    profile = one_replica(facts)
    talker = profile.replicas[0].talker
    assert nodes_of(talker.cpu_ids(), facts) == {0}
    text = dump_profile(profile)
    assert "numa_node:" not in text and "memory_nodes:" not in text  # comments only
    there = ",".join(str(cpu) for cpu in [4, 5, 6, 7][: len(talker.cpu_ids())])
    line = f'cpus: "{talker.cpus}"'
    assert text.count(line) == 1
    path = tmp_path / "moved.yaml"
    path.write_text(text.replace(line, f'cpus: "{there}"'))

    resolved = resolve(str(path), None, facts=facts)
    assert resolved.problems == ()
    assert not resolved.binding.relocated
    moved = resolved.profile.replicas[0].talker
    assert moved.cpus == there and moved.numa_node == 1 and moved.memory_node_ids() == (1,)
    env = stage_env(resolved.profile, 0, moved.stage_id)
    assert env["CPU_VISIBLE_MEMORY_NODES"] == "1"
    assert resolved.profile.replicas[0].numa_node == 1  # its home follows its talker
    # The code2wav stage was not edited and stays where it was.
    assert resolved.profile.replicas[0].code2wav == profile.replicas[0].code2wav


def test_a_stage_s_node_is_a_comment_that_follows_its_cpus():
    facts = machine(TWO_NODES)
    profile = one_replica(facts)
    loaded = parse_profile(dump_profile(profile))
    assert loaded == profile
    assert "replica 0 talker (node 0):" in dump_profile(loaded)


def test_memory_on_another_node_than_the_cpus_is_written_and_kept():
    facts = machine(TWO_NODES)
    profile = one_replica(facts)
    talker = dataclasses.replace(profile.replicas[0].talker, memory_nodes="1")
    replica = dataclasses.replace(
        profile.replicas[0], stages=(talker, profile.replicas[0].code2wav)
    )
    remote = dataclasses.replace(profile, replicas=(replica,))
    text = dump_profile(remote)
    assert text.count('memory_nodes: "1"') == 1
    assert parse_profile(text).replicas[0].talker.memory_node_ids() == (1,)


def test_cpus_numbered_across_nodes_bind_each_stage_onto_one_node_s_cores():
    # Planned where CPUs 0-1 are one node; here CPU 0 is on node 0, CPU 1 on node 1, ...
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions())
    assert [len(stage.cpu_ids()) for stage in profile.replicas[0].stages] == [1, 1]
    across = machine({0: [0, 2], 1: [1, 3]})
    binding = bind_profile(profile, across)
    assert binding.relocated and binding.misfit is None
    replica = binding.profile.replicas[0]
    assert {frozenset(nodes_of(stage.cpu_ids(), across)) for stage in replica.stages} == {
        frozenset({0})
    }
    assert all(stage.memory_node_ids() == (0,) for stage in replica.stages)


def test_a_wide_stage_numbered_across_nodes_keeps_its_cores_on_one_node():
    facts = machine(TWO_NODES)
    profile = one_replica(facts)
    across = machine({0: [0, 2, 4, 6, 8, 10], 1: [1, 3, 5, 7, 9, 11]})
    binding = bind_profile(profile, across)
    assert binding.relocated and binding.misfit is None
    stages = zip(profile.replicas[0].stages, binding.profile.replicas[0].stages, strict=True)
    for planned, bound in stages:
        assert len(bound.cpu_ids()) == len(planned.cpu_ids())
        (node,) = nodes_of(bound.cpu_ids(), across)
        assert bound.memory_node_ids() == (node,)


def test_the_node_comes_from_the_facts_where_the_stage_binds_not_from_the_planned_list():
    # Planned on one node (CPUs 0-3); edited onto CPUs 4-5, which are node 1 here.
    profile = plan_profile(machine({0: [0, 1, 2, 3]}), FOOTPRINT, PlanOptions(stages=2))
    talker = profile.replicas[0].talker
    text = dump_profile(profile).replace(f'cpus: "{talker.cpus}"', 'cpus: "4-5"')
    here = machine(TWO_NODES)
    binding = bind_profile(parse_profile(text), here)
    assert not binding.relocated and binding.misfit is None
    bound = binding.profile.replicas[0].talker
    assert (bound.cpus, bound.numa_node, bound.memory_node_ids()) == ("4-5", 1, (1,))
    assert stage_env(binding.profile, 0, bound.stage_id)["CPU_VISIBLE_MEMORY_NODES"] == "1"
