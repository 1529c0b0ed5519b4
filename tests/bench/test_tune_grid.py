"""The tune grid and its variant profiles, on planned profiles of hand-built machines."""

from __future__ import annotations

from omni_cpu.bench.tune import (
    SHARED,
    auto_point,
    best_point,
    grid_points,
    variant_profile,
    verdict,
)
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.placement import reserved_kv_bytes
from omni_cpu.profile import Profile, dump_profile, parse_profile
from tests.helpers.machines import machine

FOOTPRINT = footprint_for_model("0.6b")


def _facts(cores: int):
    return machine({0: list(range(cores))})


def _profile(cores: int) -> Profile:
    return plan_profile(_facts(cores), FOOTPRINT, PlanOptions())


def _variant(cores: int, point) -> Profile:
    return variant_profile(_facts(cores), FOOTPRINT, PlanOptions(), point)


def test_grid_starts_with_the_auto_point() -> None:
    profile = _profile(2)
    assert grid_points(profile, ("bfloat16", "float32"), 5)[0] == auto_point(profile)


def test_grid_respects_max_points_and_has_no_duplicates() -> None:
    points = grid_points(_profile(8), ("bfloat16", "float32"), 7)
    assert len(points) == 7
    assert len(set(points)) == 7


def test_single_choice_changes_come_before_combinations() -> None:
    profile = _profile(2)
    auto = auto_point(profile)
    names = ("talker_cores", "chunk_frames", "max_num_seqs", "dtype")
    changes = [
        sum(getattr(point, name) != getattr(auto, name) for name in names)
        for point in grid_points(profile, ("bfloat16", "float32"), 100)
    ]
    assert changes[0] == 0
    assert changes == sorted(changes)
    assert max(changes) >= 2


def test_only_the_planned_dtype_without_native_bf16() -> None:
    points = grid_points(_profile(4), (), 100)
    assert {point.dtype for point in points} == {auto_point(_profile(4)).dtype}


def test_variant_of_the_auto_point_keeps_the_plan() -> None:
    profile = _profile(4)
    variant = _variant(4, auto_point(profile))
    assert variant.stages == profile.stages
    assert variant.streaming == profile.streaming


def test_shared_variant_puts_both_stages_on_every_compute_core() -> None:
    profile = _profile(4)
    point = grid_points(profile, (), 100)[1]
    assert point.talker_cores == SHARED
    variant = _variant(4, point)
    assert variant.stages[0].cpus == variant.stages[1].cpus == "0-3"


def test_variant_scales_talker_kv_bytes_with_max_num_seqs() -> None:
    profile = _profile(2)
    auto = auto_point(profile)
    half = _variant(2, auto.__class__(auto.talker_cores, 25, auto.max_num_seqs // 2, auto.dtype))
    # Streams' blocks scale; the block pool's one null block does not.
    null_block = reserved_kv_bytes(FOOTPRINT, profile.stages[0].dtype)
    streams_kv = profile.stages[0].kv_cache_memory_bytes - null_block
    assert (half.stages[0].kv_cache_memory_bytes - null_block) * 2 == streams_kv


def test_float32_variant_holds_twice_the_kv_bytes_per_stream_of_bfloat16() -> None:
    profile = _profile(2)
    auto = auto_point(profile)
    assert auto.dtype == "bfloat16"
    wide = _variant(2, auto.__class__(auto.talker_cores, 25, auto.max_num_seqs, "float32"))
    per_seq = [
        p.stages[0].kv_cache_memory_bytes // p.stages[0].max_num_seqs for p in (profile, wide)
    ]
    assert per_seq[1] == 2 * per_seq[0]  # a float32 K/V entry is twice a bf16 one
    assert {stage.dtype for stage in wide.stages} == {"float32"}


def test_every_variant_is_what_the_planner_makes_with_its_choices_fixed() -> None:
    profile = _profile(8)
    for point in grid_points(profile, ("bfloat16", "float32"), 100):
        variant = _variant(8, point)
        assert auto_point(variant) == point


def test_variant_profile_round_trips_through_yaml() -> None:
    profile = _profile(4)
    variant = _variant(4, grid_points(profile, ("bfloat16", "float32"), 100)[-1])
    assert parse_profile(dump_profile(variant)).stages == variant.stages


def _row(point: str, rtf: float, throughput: float, auto: bool = False) -> dict:
    return {"point": point, "auto": auto, "error": None, "rtf_1": rtf, "throughput_4": throughput}


def test_verdict_accepts_auto_within_ten_percent_on_both() -> None:
    rows = [_row("a", 2.1, 0.95, auto=True), _row("b", 2.0, 1.0)]
    assert verdict(rows)["auto_within_tolerance"] is True


def test_verdict_rejects_auto_that_is_slower_than_the_best_by_more_than_ten_percent() -> None:
    rows = [_row("a", 2.5, 1.0, auto=True), _row("b", 2.0, 1.0)]
    result = verdict(rows)
    assert result["auto_rtf_1_ok"] is False
    assert result["best_rtf_1"] == "b"


def test_failed_points_are_ignored_by_the_verdict_and_the_best() -> None:
    rows = [_row("a", 2.0, 1.0, auto=True), {"point": "b", "auto": False, "error": "boom"}]
    assert verdict(rows)["auto_within_tolerance"] is True
    assert best_point(rows)["point"] == "a"


def test_best_point_prefers_throughput_among_the_fast_single_streams() -> None:
    rows = [_row("a", 2.0, 1.0), _row("b", 2.1, 1.5), _row("c", 3.0, 3.0)]
    assert best_point(rows)["point"] == "b"
