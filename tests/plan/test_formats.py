"""Each weight format's predicted capacity on a machine, and the hint where another plays
better than the chosen one (omni_cpu.plan.formats), on hand-built machines."""

from __future__ import annotations

import dataclasses

import pytest

from omni_cpu import weight_formats
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.formats import (
    FormatCapacity,
    compare_formats,
    format_headline,
    format_hint,
    profile_options,
)
from omni_cpu.plan.policy import PlanOptions, plan_profile
from tests.helpers.machines import GIB, machine

FOOTPRINT = footprint_for_model(None)
AVX2_6 = machine({0: [0, 1, 2, 3, 4, 5]}, isa=("avx2", "fma"))  # int4 plays, the dtype does not
ARM_4 = machine({0: [0, 1, 2, 3]}, isa=("asimd", "bf16"), architecture="aarch64")
# An aarch64 CPU that states no ASIMD: the NEON kernels' floor is missing.
ARM_4_NO_ASIMD = machine({0: [0, 1, 2, 3]}, isa=("fp",), architecture="aarch64")


def test_every_format_the_cpu_runs_is_planned_as_the_chosen_plan_but_for_its_weights():
    rows = compare_formats(AVX2_6, FOOTPRINT, PlanOptions(weights="int8"))
    assert [row.weights for row in rows] == weight_formats.runnable("x86_64", ("avx2", "fma"))
    assert [row.chosen for row in rows] == [row.weights == "int8" for row in rows]
    for row in rows:
        profile = plan_profile(AVX2_6, FOOTPRINT, PlanOptions(weights=row.weights))
        own = profile.replicas[0].capacity
        assert (row.rtf_one_stream, row.safe_start_s) == (own.rtf_one_stream, own.safe_start_s)
        assert row.stall_free_streams == profile.capacity.stall_free_streams
        assert row.realtime_streams == profile.capacity.realtime_streams
        assert row.talker == profile.capacity.weights
    assert rows[0].talker == "float32"  # the dtype where the format is the checkpoint's


def test_a_cpu_without_a_formats_kernels_lists_only_what_runs():
    rows = compare_formats(ARM_4_NO_ASIMD, FOOTPRINT, PlanOptions())
    assert [row.weights for row in rows] == ["model"]


def test_an_arm_cpu_with_asimd_lists_every_format():
    rows = compare_formats(ARM_4, FOOTPRINT, PlanOptions())
    assert [row.weights for row in rows] == ["model", "int8", "int4"]


def test_a_format_that_does_not_fit_the_memory_is_listed_with_why():
    # Room for int4's talker and not for the checkpoint dtype's.
    small = machine({0: [0, 1, 2, 3]}, isa=("avx2", "fma"), memory_per_node=int(7 * GIB))
    rows = {
        row.weights: row for row in compare_formats(small, FOOTPRINT, PlanOptions(weights="int4"))
    }
    assert rows["model"].refused and rows["model"].stall_free_streams is None
    assert not rows["int4"].refused and rows["int4"].stall_free_streams is not None


def test_the_hint_names_the_format_that_plays_and_the_check_before_it():
    rows = compare_formats(AVX2_6, FOOTPRINT, PlanOptions())
    chosen = next(row for row in rows if row.chosen)
    assert chosen.stall_free_streams == 0
    hint = format_hint(rows)
    assert hint is not None
    assert hint.startswith("--weights model plays no stream without a gap here")
    assert "--weights int4 would play 1 stream without one" in hint
    assert hint.endswith("omni-cpu check-weights --model DIR --weights int4")


@pytest.mark.parametrize(
    ("facts", "weights"),
    [
        (AVX2_6, "int4"),  # the chosen format plays
        (machine({0: [0, 1]}, isa=("avx2", "fma")), "model"),  # no format plays on two cores
        (ARM_4_NO_ASIMD, "model"),  # nothing else runs
    ],
)
def test_no_hint_where_the_chosen_format_plays_or_none_would(facts, weights):
    assert format_hint(compare_formats(facts, FOOTPRINT, PlanOptions(weights=weights))) is None


def test_a_loaded_profile_gives_back_the_options_it_states():
    options = PlanOptions(weights="int8", dtype="float32", code2wav_dtype="bfloat16")
    profile = plan_profile(AVX2_6, FOOTPRINT, options)
    again = profile_options(profile)
    assert dataclasses.replace(again, calibration=None) == PlanOptions(
        weights="int8", dtype="float32", code2wav_dtype="bfloat16"
    )


def test_the_headline_says_the_chosen_format_cannot_keep_up_and_which_flag_plays():
    rows = compare_formats(AVX2_6, FOOTPRINT, PlanOptions())
    chosen = next(row for row in rows if row.chosen)
    int4 = next(row for row in rows if row.weights == "int4")
    assert chosen.rtf_one_stream is not None and chosen.rtf_one_stream > 1
    assert format_headline(rows) == (
        f"float32 cannot keep up here (RTF {chosen.rtf_one_stream:.2f}); "
        f"--weights int4 plays from {int4.safe_start_s:.2f} s"
    )


def test_a_format_fast_enough_but_slow_to_start_is_said_so_in_the_headline():
    slow_start = FormatCapacity("model", "bfloat16", "built-in", 0.9, 15.04, 0, 1, chosen=True)
    plays = FormatCapacity("int4", "int4", "built-in", 0.4, 0.2, 2, 2)
    assert format_headline((slow_start, plays)) == (
        "bfloat16 plays no stream without a gap here (safe start 15.0 s); "
        "--weights int4 plays from 0.20 s"
    )


@pytest.mark.parametrize(
    ("facts", "weights"),
    [(AVX2_6, "int4"), (machine({0: [0, 1]}, isa=("avx2", "fma")), "model"), (ARM_4, "int4")],
)
def test_no_headline_where_the_hint_has_nothing_to_say(facts, weights):
    assert format_headline(compare_formats(facts, FOOTPRINT, PlanOptions(weights=weights))) is None
