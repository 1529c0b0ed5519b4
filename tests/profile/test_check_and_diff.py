"""`validate` finds what no longer fits; `diff` shows what changed."""

from __future__ import annotations

from dataclasses import replace

from omni_cpu.hardware.facts import Limits
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.fit import check_profile
from omni_cpu.profile.diff import diff_profiles
from tests.helpers.machines import GIB, machine

FOOTPRINT = footprint_for_model("0.6b")
BIG = machine({0: list(range(8)), 1: list(range(8, 16))})
PROFILE = plan_profile(BIG, FOOTPRINT)


def with_stage_cpus(profile, cpus: str, stage_id: int = 0, replica: int = 0):
    replicas = list(profile.replicas)
    target = replicas[replica]
    stages = tuple(
        replace(stage, cpus=cpus) if stage.stage_id == stage_id else stage
        for stage in target.stages
    )
    replicas[replica] = replace(target, stages=stages)
    return replace(profile, replicas=tuple(replicas))


def test_profile_fits_the_machine_it_was_planned_on():
    assert check_profile(PROFILE, BIG, FOOTPRINT) == []


def test_missing_cpus_are_reported():
    small = machine({0: [0, 1, 2, 3]})
    problems = check_profile(PROFILE, small, FOOTPRINT)
    assert any("do not exist here" in p for p in problems)


def test_offline_cpus_are_reported():
    problems = check_profile(PROFILE, machine({0: list(range(8)), 1: list(range(8, 16))},
                                               offline=(1,)), FOOTPRINT)  # fmt: skip
    assert any("CPUs 1 are offline" in p for p in problems)


def test_cpus_outside_the_cgroup_are_reported():
    facts = replace(BIG, limits=Limits(cgroup_version=2, cpuset_cpus="8-15"))
    problems = check_profile(PROFILE, facts, FOOTPRINT)
    assert any("cgroup cpuset" in p for p in problems)


def test_overlapping_stages_are_reported():
    both = f"{PROFILE.replicas[0].stage(0).cpus},{PROFILE.replicas[0].stage(1).cpus}"
    overlapping = with_stage_cpus(PROFILE, both, stage_id=1)
    assert any("used by both" in p for p in check_profile(overlapping, BIG, FOOTPRINT))


def test_a_stage_spanning_nodes_is_reported():
    spanning = with_stage_cpus(PROFILE, "6,9", stage_id=1)
    assert any("span NUMA nodes" in p for p in check_profile(spanning, BIG, FOOTPRINT))


def test_memory_that_does_not_fit_is_reported():
    small_memory = machine({0: list(range(8)), 1: list(range(8, 16))}, memory_per_node=8 * GIB)
    assert any("GiB" in p for p in check_profile(PROFILE, small_memory, FOOTPRINT))


def test_bf16_on_a_cpu_without_it_is_reported():
    no_bf16 = machine({0: list(range(8)), 1: list(range(8, 16))}, isa=("avx2",))
    assert any("bfloat16" in p for p in check_profile(PROFILE, no_bf16, FOOTPRINT))


def test_identical_profiles_have_no_diff():
    assert diff_profiles(PROFILE, PROFILE) == []


def test_diff_names_each_changed_key():
    other = plan_profile(BIG, FOOTPRINT, PlanOptions(max_seqs=2))
    changes = {change.key: change for change in diff_profiles(PROFILE, other)}
    assert "stages[0].max_num_seqs" in changes
    assert changes["stages[0].max_num_seqs"].after == 2
    assert all(change.kind == "changed" for change in changes.values())


def test_diff_shows_added_replicas():
    one_node = plan_profile(machine({0: list(range(8))}), FOOTPRINT)
    kinds = {change.kind for change in diff_profiles(one_node, PROFILE)}
    assert "added" in kinds


def test_stages_sharing_the_same_cores_on_purpose_are_accepted():
    shared = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(stages=1))
    assert check_profile(shared, machine({0: [0, 1]}), FOOTPRINT) == []


def test_a_profile_names_the_kind_it_was_planned_for():
    assert PROFILE.model_kind == "custom-voice"
    base = plan_profile(BIG, footprint_for_model("Qwen/Qwen3-TTS-12Hz-0.6B-Base"))
    assert (base.model, base.model_kind) == ("qwen3-tts-12hz-0.6b-base", "base")


def test_a_profile_used_with_another_kind_of_model_is_reported():
    base = footprint_for_model("Qwen/Qwen3-TTS-12Hz-0.6B-Base")
    (problem,) = check_profile(PROFILE, BIG, base)
    assert "planned for a custom-voice model" in problem and "a base model" in problem


def test_int4_weights_on_a_cpu_without_avx2_are_reported_naming_the_field():
    from omni_cpu import envs

    int4 = PROFILE.with_choice(envs.WEIGHTS, "int4")
    no_avx2 = machine({0: list(range(8)), 1: list(range(8, 16))}, isa=("avx512_bf16",))
    (problem,) = check_profile(int4, no_avx2, FOOTPRINT)
    assert problem.startswith("stages[0].additional_config.omni_cpu.weights int4 needs AVX2")


def test_each_problem_names_the_field_to_edit():
    small_memory = machine({0: list(range(8)), 1: list(range(8, 16))}, memory_per_node=8 * GIB)
    memory = check_profile(PROFILE, small_memory, FOOTPRINT)
    # Replica 0's sizes are written in the deploy config's stages, the others' in their entry.
    assert [p.split(":")[0] for p in memory] == [
        "stages[0].kv_cache_memory_bytes",
        "omni_cpu.replicas[1].stages[0].kv_cache_memory_bytes",
    ]
    both = f"{PROFILE.replicas[0].stage(0).cpus},{PROFILE.replicas[0].stage(1).cpus}"
    (overlap, *_) = check_profile(with_stage_cpus(PROFILE, both, stage_id=1), BIG, FOOTPRINT)
    assert "omni_cpu.replicas[0].stages[1].cpus (replica 0 code2wav)" in overlap
