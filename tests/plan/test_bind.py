"""A profile's shape bound onto the CPUs and memory nodes a process may use."""

from __future__ import annotations

import dataclasses

from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.bind import PRELOAD_FILES, bind_profile, preload_names
from omni_cpu.plan.fit import WARNS, check_problems, failing_and_said
from omni_cpu.profile.model import PRELOAD_NAMES, Profile
from tests.helpers.machines import machine

FOOTPRINT = footprint_for_model("0.6b")


def planned_on(nodes: dict[int, list[int]], **options) -> Profile:
    return plan_profile(machine(nodes), FOOTPRINT, PlanOptions(**options))


def pod(nodes: dict[int, list[int]], cpuset: str, **kwargs) -> Facts:
    """A machine whose cgroup cpuset lets this process use `cpuset` only."""
    facts = machine(nodes, **kwargs)
    return dataclasses.replace(facts, limits=dataclasses.replace(facts.limits, cpuset_cpus=cpuset))


def unchanged_but_binding(before: Profile, after: Profile) -> bool:
    """Every value but the CPUs, nodes and preload paths is as written."""

    def shape_free(profile: Profile) -> Profile:
        replicas = tuple(
            dataclasses.replace(
                replica,
                numa_node=0,
                frontend_cpus="",
                stages=tuple(
                    dataclasses.replace(stage, cpus="", numa_node=0, memory_nodes="")
                    for stage in replica.stages
                ),
            )
            for replica in profile.replicas
        )
        return dataclasses.replace(profile, replicas=replicas, preload_paths=())

    return shape_free(before) == shape_free(after)


def test_a_profile_on_the_machine_it_was_planned_on_binds_as_planned():
    profile = planned_on({0: [0, 1, 2, 3]})
    binding = bind_profile(profile, machine({0: [0, 1, 2, 3]}))
    assert not binding.relocated and binding.misfit is None
    assert binding.profile == profile
    assert all(move.planned == move.here for move in binding.moves)


def test_a_pod_whose_cpus_the_kubelet_picked_gets_the_same_shape_there():
    profile = planned_on({0: [0, 1, 2, 3]})
    binding = bind_profile(profile, pod({0: list(range(16))}, "9,11-13"))
    assert binding.relocated and binding.misfit is None
    planned = [len(stage.cpu_ids()) for stage in profile.replicas[0].stages]
    here = [len(stage.cpu_ids()) for stage in binding.profile.replicas[0].stages]
    assert here == planned
    bound = set().union(*(stage.cpu_ids() for stage in binding.profile.replicas[0].stages))
    assert bound <= {9, 11, 12, 13}
    assert unchanged_but_binding(profile, binding.profile)
    assert not check_problems(binding.profile, pod({0: list(range(16))}, "9,11-13"), FOOTPRINT)


def test_the_binding_reads_planned_then_here():
    profile = planned_on({0: [0, 1]})
    binding = bind_profile(profile, pod({0: [0, 1, 2, 3]}, "2-3"))
    assert binding.lines() == [
        "replica 0 talker: planned 0 → here 2 (1 core)",
        "replica 0 code2wav: planned 1 → here 3 (1 core)",
    ]


def test_a_replica_moves_to_a_node_that_can_hold_it():
    profile = planned_on({0: [0, 1, 2, 3]})
    facts = pod({0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, "1,4-7")
    binding = bind_profile(profile, facts)
    replica = binding.profile.replicas[0]
    assert replica.numa_node == 1
    assert all(stage.numa_node == 1 and stage.memory_nodes == "1" for stage in replica.stages)
    assert replica.cpu_ids() <= {4, 5, 6, 7}


def test_a_shape_that_does_not_fit_is_one_line_naming_the_missing_core():
    profile = planned_on({0: [0, 1]})
    binding = bind_profile(profile, pod({0: [0, 1]}, "1"))
    assert binding.misfit is not None and "\n" not in binding.misfit
    assert "binds 2 cores on one node (talker 1, code2wav 1)" in binding.misfit
    assert "may use 1 on any one node (CPUs 1)" in binding.misfit
    assert "CPU 0 (replica 0 talker) not here" in binding.misfit
    # Bound anyway, for --force: both stages on the one core there is.
    assert {stage.cpus for stage in binding.profile.replicas[0].stages} == {"1"}
    problems = check_problems(binding.profile, pod({0: [0, 1]}, "1"), FOOTPRINT, binding=binding)
    assert problems[0].kind == "shape"


def test_stages_planned_on_the_same_cores_share_them_wherever_they_bind():
    profile = planned_on({0: [0, 1]}, stages=1)
    assert profile.replicas[0].stages[0].cpus == profile.replicas[0].stages[1].cpus
    binding = bind_profile(profile, pod({0: [0, 1, 2, 3]}, "2-3"))
    talker, code2wav = binding.profile.replicas[0].stages
    assert talker.cpus == code2wav.cpus == "2-3"


def test_smt_siblings_bind_as_whole_cores():
    profile = planned_on({0: [0, 1]})
    stages = tuple(
        dataclasses.replace(stage, cpus=cpus, smt_siblings=True)
        for stage, cpus in zip(profile.replicas[0].stages, ("0,4", "1,5"), strict=True)
    )
    wide = dataclasses.replace(
        profile, replicas=(dataclasses.replace(profile.replicas[0], stages=stages),)
    )
    facts = pod({0: [0, 1, 2, 3]}, "2-3,6-7", smt=2)
    bound = bind_profile(wide, facts).profile.replicas[0].stages
    assert [stage.cpus for stage in bound] == ["2,6", "3,7"]


def test_preloads_are_found_among_the_libraries_of_the_runtime_that_runs():
    profile = dataclasses.replace(planned_on({0: [0, 1]}), preload=("intel-openmp", "tcmalloc"))
    facts = dataclasses.replace(
        machine({0: [0, 1]}),
        preload_libraries=["/srv/env/lib/libiomp5.so", "/usr/lib/libtcmalloc_minimal.so.4"],
    )
    bound = bind_profile(profile, facts).profile
    assert bound.preload_paths == ("/srv/env/lib/libiomp5.so", "/usr/lib/libtcmalloc_minimal.so.4")
    from omni_cpu.profile import stage_env

    env = stage_env(bound, 0, 0)
    assert env["LD_PRELOAD"] == "/srv/env/lib/libiomp5.so:/usr/lib/libtcmalloc_minimal.so.4"
    assert "KMP_AFFINITY" in env


def test_a_preload_the_runtime_lacks_is_a_problem_naming_the_field():
    profile = dataclasses.replace(planned_on({0: [0, 1]}), preload=("tcmalloc",))
    facts = dataclasses.replace(machine({0: [0, 1]}), source="live", preload_libraries=[])
    problems = [p for p in check_problems(profile, facts) if p.kind == "preload"]
    assert len(problems) == 1 and "omni_cpu.preload: tcmalloc" in problems[0].message


def test_start_preloads_what_the_runtime_has_and_says_what_it_lacks_in_one_line():
    profile = dataclasses.replace(planned_on({0: [0, 1]}), preload=("intel-openmp", "tcmalloc"))
    facts = dataclasses.replace(
        machine({0: [0, 1]}), source="live", preload_libraries=["/usr/lib/libtcmalloc.so.4"]
    )
    resolved = resolve_here(profile, facts)
    assert resolved.profile.preload_paths == ("/usr/lib/libtcmalloc.so.4",)
    (said,) = resolved.of_kind("preload")
    assert "intel-openmp" in said.message and "start without it" in said.message
    assert "\n" not in said.message and "preload" in WARNS


def test_a_runtime_with_none_of_the_preloads_starts_and_names_both_in_one_line():
    profile = dataclasses.replace(planned_on({0: [0, 1]}), preload=("intel-openmp", "tcmalloc"))
    facts = dataclasses.replace(machine({0: [0, 1]}), source="live", preload_libraries=[])
    resolved = resolve_here(profile, facts)
    assert resolved.profile.preload_paths == ()
    (said,) = resolved.of_kind("preload")
    assert "intel-openmp" in said.message and "tcmalloc" in said.message


def test_validate_says_a_missing_preload_and_fails_on_the_rest():
    profile = dataclasses.replace(planned_on({0: [0, 1]}), preload=("tcmalloc",))
    facts = dataclasses.replace(machine({0: [0, 1]}), source="live", preload_libraries=[])
    overlapping = dataclasses.replace(
        profile.replicas[0],
        stages=tuple(dataclasses.replace(s, cpus="0-1") for s in profile.replicas[0].stages[:1])
        + tuple(dataclasses.replace(s, cpus="1") for s in profile.replicas[0].stages[1:]),
    )
    failing, said = failing_and_said(
        check_problems(dataclasses.replace(profile, replicas=(overlapping,)), facts)
    )
    assert len(said) == 1 and "tcmalloc" in said[0]
    assert failing and all("CPU 1 is used by both" in line for line in failing)


def resolve_here(profile: Profile, facts: Facts):
    """`resolve` of `profile` saved to a file, on `facts` (as run and serve start)."""
    import tempfile
    from pathlib import Path

    from omni_cpu.plan.resolve import resolve
    from omni_cpu.profile import save_profile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "deploy.yaml"
        save_profile(profile, path)
        return resolve(str(path), None, facts=facts)


def test_every_preload_name_the_profile_takes_has_its_files():
    assert set(PRELOAD_FILES) == set(PRELOAD_NAMES)
    assert preload_names(["/a/libtcmalloc.so.4", "/b/libiomp5.so"]) == ("tcmalloc", "intel-openmp")
