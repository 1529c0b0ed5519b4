"""A stage is named by its one id, or by the replica's talker / code2wav."""

from __future__ import annotations

from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile.model import CODE2WAV_STAGE, STAGE_NAMES, TALKER_STAGE
from tests.helpers.machines import machine


def test_a_replica_names_its_talker_and_code2wav_by_the_stage_ids():
    profile = plan_profile(machine({0: [0, 1]}), footprint_for_model("tiny"), PlanOptions())
    replica = profile.replicas[0]
    assert replica.talker.stage_id == TALKER_STAGE and replica.code2wav.stage_id == CODE2WAV_STAGE
    assert STAGE_NAMES[TALKER_STAGE] == "talker" and STAGE_NAMES[CODE2WAV_STAGE] == "code2wav"
    assert {stage.stage_id for stage in replica.stages} == {TALKER_STAGE, CODE2WAV_STAGE}
