"""The planner on every real machine's dump, and the example profiles kept fresh."""

from __future__ import annotations

import pytest

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import (
    MachineTooSmallError,
    PlanError,
    choose_dtype,
    footprint_for_model,
    plan_profile,
)
from omni_cpu.plan.fit import check_profile
from omni_cpu.profile import parse_profile
from tests.helpers import sysroots
from tests.helpers.machines import with_memory
from tests.helpers.scripts import load_script

FOOTPRINT = footprint_for_model("0.6b")
examples = load_script("scripts/make_example_profiles.py")
ROOMY_BYTES = 64 * 2**30


def plan_with_room(facts):
    """The plan and the facts it was made for: a machine too small for the model (whose
    refusal the first test checks) is planned with 64 GiB, so its placement is still checked."""
    try:
        return plan_profile(facts, FOOTPRINT), facts
    except MachineTooSmallError:
        roomy = with_memory(facts, ROOMY_BYTES)
        return plan_profile(roomy, FOOTPRINT), roomy


def test_every_dump_plans_or_states_in_one_line_why_it_cannot(dump, dump_root):
    facts = read_facts(dump_root)
    try:
        profile = plan_profile(facts, FOOTPRINT)
    except PlanError as error:
        # Only memory may stop a plan, and the line says how much is needed and had.
        assert isinstance(error, MachineTooSmallError), error
        line = error.one_line()
        assert "\n" not in line and "needs about" in line and "gives it" in line
        known = facts.memory_total_bytes or sum(n.memory_bytes or 0 for n in facts.numa_nodes)
        assert 0 < known < 12 * 2**30, line
    else:
        assert profile.replicas


def test_every_dump_plans_the_expected_dtype(dump, dump_root):
    assert choose_dtype(read_facts(dump_root)) == dump.expected["expected_dtype"]


def test_every_dump_plan_fits_its_own_machine(dump, dump_root):
    facts = read_facts(dump_root)
    profile, facts = plan_with_room(facts)
    assert check_profile(profile, facts, FOOTPRINT) == []
    # Each stage binds one thread per physical core, never both SMT siblings.
    for replica in profile.replicas:
        for stage in replica.stages:
            cpus = parse_cpu_list(stage.cpus)
            for cpu in cpus if len(cpus) > 1 else ():
                siblings = set(parse_cpu_list(facts.cpu(cpu).thread_siblings)) - {cpu}
                assert not siblings & set(cpus), (stage, cpu)


def test_multi_node_dump_gets_one_replica_per_node_with_cpus(dump, dump_root):
    facts = read_facts(dump_root)
    nodes_with_cpus = [n.id for n in facts.numa_nodes if parse_cpu_list(n.cpus)]
    profile, _ = plan_with_room(facts)
    assert [r.numa_node for r in profile.replicas] == nodes_with_cpus


@pytest.mark.parametrize("dump_id", sorted(examples.EXAMPLES))
def test_example_profile_is_fresh(dump_id, unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == dump_id)
    checked_in = examples.PROFILES_DIR / examples.EXAMPLES[dump_id]
    expected = examples.example_profile_text(unpacked_dumps.root(dump))
    assert checked_in.read_text() == expected, "stale: run `make profiles` and review the diff"
    parse_profile(checked_in.read_text())  # and it loads strictly


def test_planning_docs_capacity_table_is_fresh(unpacked_dumps):
    dumps = {d.id: d for d in sysroots.load_dumps()}
    roots = {dump_id: unpacked_dumps.root(dumps[dump_id]) for dump_id in examples.EXAMPLES}
    page = examples.PLANNING.read_text()
    expected = examples.with_table(page, examples.capacity_rows(roots))
    assert page == expected, "stale: run `make profiles` and review the diff"
