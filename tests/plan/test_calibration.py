"""A calibration is a planning input: it moves the split, and it travels in the profile."""

from __future__ import annotations

import dataclasses

from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile import dump_profile, parse_profile
from omni_cpu.profile.calibration import Calibration
from tests.helpers.machines import machine

FOOTPRINT = footprint_for_model("0.6b")


def plan(calibration: Calibration | None):
    return plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(calibration=calibration))


def test_without_a_calibration_the_stated_constants_plan():
    profile = plan(None)
    assert profile.machine.calibration is None
    # Zen 4 with omni-cpu's GEMV, measured: split RTF 3.85, shared 4.71 (costs.py).
    assert (profile.stages[0].cpus, profile.stages[1].cpus) == ("0", "1")


def test_bandwidth_that_does_not_grow_with_cores_splits_the_stages():
    flat = Calibration(bandwidth_gb_s={1: 16.0, 2: 16.0}, code2wav_ms_per_frame={"bfloat16": 46})
    profile = plan(flat)
    assert (profile.stages[0].cpus, profile.stages[1].cpus) == ("0", "1")


def test_bandwidth_that_doubles_with_cores_shares_them():
    # Slow enough that streaming, not the step's fixed overhead, is nearly all of the step:
    # only then does a second core's bandwidth outweigh what sharing loses to spinning.
    scaling = Calibration(bandwidth_gb_s={1: 0.5, 2: 1.0}, code2wav_ms_per_frame={"bfloat16": 46})
    profile = plan(scaling)
    assert profile.stages[0].cpus == profile.stages[1].cpus == "0-1"
    assert any("calibrated" in note for note in profile.notes)


def test_the_calibration_is_kept_in_the_profiles_machine_block():
    measured = Calibration({1: 11.4, 2: 10.3}, {"bfloat16": 51.3, "float32": 95.7}, 11.3)
    profile = plan(measured)
    text = dump_profile(profile)
    assert "calibration:" in text
    loaded = parse_profile(text)
    assert loaded == profile
    assert Calibration.from_dict(loaded.machine.calibration) == measured


def test_a_calibration_written_before_small_ops_and_calls_reads_back_the_same():
    older = {
        "bandwidth_gb_s": {"1": 11.4},
        "code2wav_ms_per_frame": {"bfloat16": 51.3},
        "seconds": 9.0,
    }
    assert Calibration.from_dict(older).to_dict() == older


def test_small_op_time_and_code2wav_calls_travel_in_the_profile_and_move_the_plan():
    measured = Calibration(
        {1: 13.0, 2: 20.0},
        {"bfloat16": 30.0},
        12.0,
        code2wav_ms_per_call={"bfloat16": 45.0},
        small_op_us=6.0,
    )
    profile = plan(measured)
    loaded = parse_profile(dump_profile(profile))
    assert Calibration.from_dict(loaded.machine.calibration) == measured
    # Twice the reference small-op time: twice the built-in per-step overhead.
    slower = profile.replicas[0].capacity.talker_step_ms
    quicker = plan(dataclasses.replace(measured, small_op_us=3.0)).replicas[0].capacity
    assert slower > quicker.talker_step_ms
