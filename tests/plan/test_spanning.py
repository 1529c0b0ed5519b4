"""Every machine that can run the model is planned: where no one node holds a replica, one
replica spans the fewest nodes that do (issue 48's shapes, built as their dumps lay out)."""

from __future__ import annotations

import subprocess
import sys

from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import footprint_for_model, plan_profile
from omni_cpu.plan.fit import check_profile
from tests.helpers.machines import (
    FakeMachine,
    cgroup2_job,
    every_node_lists_every_cpu,
    node_per_socket,
)

BIG = footprint_for_model("1.7b")
SMALL = footprint_for_model("0.6b")


def _two_of_four_7_gib_nodes(folder) -> FakeMachine:
    # CPUs of node 0, memory of nodes 2-3: 14 GiB usable, no one node holds a 1.7B replica.
    return cgroup2_job(
        node_per_socket(FakeMachine(folder), sockets=4, cores=8, node_gib=7), "0-7", "2-3"
    )


def test_memory_two_nodes_hold_together_is_spanned_not_refused(tmp_path):
    facts = read_facts(_two_of_four_7_gib_nodes(tmp_path).root)
    profile = plan_profile(facts, BIG)
    [replica] = profile.replicas
    assert {s.memory_nodes for s in replica.stages} == {"2-3"}
    assert replica.stage(0).dtype == "bfloat16"
    assert any("nodes 2+3 form one replica" in note for note in profile.notes)
    assert check_profile(profile, facts, BIG) == []


def test_probe_plans_the_1_7b_model_there_and_exits_0(tmp_path):
    root = _two_of_four_7_gib_nodes(tmp_path).root
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "probe", "--sysroot", str(root), "--model", "1.7b"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_a_buggy_firmware_numa_table_is_planned_as_one_node_over_all_its_memory(tmp_path):
    # Eight nodes naming every CPU, 15.85 GiB split over them: one node, its memory bound
    # over all eight (the kernel spreads it over them), never node 0's 2 GiB alone.
    machine = every_node_lists_every_cpu(
        FakeMachine(tmp_path), [2.0, 1.9, 2.1, 1.8, 2.2, 1.85, 1.95, 2.05]
    )
    facts = read_facts(machine.root)
    profile = plan_profile(facts, SMALL)
    [replica] = profile.replicas
    assert {(s.numa_node, s.memory_nodes) for s in replica.stages} == {(0, "0-7")}
    assert any("planned as one node" in note for note in profile.notes)
    assert check_profile(profile, facts, SMALL) == []
