"""The one stage watcher of `run` and `serve`, on real processes and real deploy configs.

A stage process is told by its title (vLLM's setproctitle names an engine core's
stage) or, failing that, by the bind list its stage's environment carries.
"""

from __future__ import annotations

import os

from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.process.stage_processes import BIND_ENV, identify, stage_binds
from omni_cpu.process.watch import StageWatch
from omni_cpu.profile import deploy_config_dict
from tests.helpers.machines import machine
from tests.helpers.stages import stand_in


def deploy_config(stages: int) -> dict:
    """The deploy config `run` and `serve` hand vLLM-Omni for a two-core machine planned with
    the stages on cores of their own (2) or sharing both (1)."""
    options = PlanOptions(stages=stages)
    profile = plan_profile(machine({0: [0, 1]}), footprint_for_model("0.6b"), options)
    return deploy_config_dict(profile)


def test_split_stages_each_have_their_own_bind_list():
    binds = stage_binds(deploy_config(stages=2))
    assert binds == {"0": ((0, "talker"),), "1": ((1, "code2wav"),)}


def test_stages_sharing_their_cpus_share_one_bind_list_in_stage_order():
    assert stage_binds(deploy_config(stages=1)) == {"0-1": ((0, "talker"), (1, "code2wav"))}


def test_a_process_whose_title_names_no_stage_is_told_by_its_bind_list():
    binds = stage_binds(deploy_config(stages=2))
    with stand_in("EngineCore", {BIND_ENV: "1"}) as child:
        found = identify(child.pid, binds)
    assert found.describe() == f"stage 1 (code2wav) engine core pid {child.pid}"


def test_a_killed_stage_process_is_named_after_it_is_gone():
    watch = StageWatch(os.getpid(), {}, stall_s=0)
    with stand_in("VLLM::EngineCore_stage0_replica0") as child:
        watch.sample()
        assert watch.deaths() is None
    child.wait()
    assert watch.deaths() == f"stage 0 (talker) engine core pid {child.pid} died"


def test_a_process_that_is_no_stage_is_not_reported_dead():
    watch = StageWatch(os.getpid(), {}, stall_s=0)
    with stand_in("multiprocessing.resource_tracker") as child:
        watch.sample()
    child.wait()
    assert watch.seen[child.pid].role == "resource tracker"
    assert watch.deaths() is None
