"""The cache hit-against-miss benchmark's arithmetic, on made-up runs (no engines)."""

from __future__ import annotations

import pytest

from tests.helpers.scripts import load_script

cache_speed = load_script("benchmarks/weight_cache_speed.py")


def _run(cache: str, step: float) -> dict:
    return {
        "weight_cache": cache,
        "talker_step_ms": step,
        "code_predictor_ms": step / 2,
        "code2wav_ms_per_frame": 50.0,
        "rtf_p50": step / 80,
    }


def test_the_summary_sets_the_hits_median_over_the_misses() -> None:
    summary = cache_speed.summarize(
        [_run("off", 60), _run("hit", 90), _run("off", 66), _run("hit", 80), _run("off", 70)]
    )
    assert summary["talker_step_ms"]["miss"] == 66
    assert summary["talker_step_ms"]["hit"] == 85
    assert summary["talker_step_ms"]["hit_over_miss"] == pytest.approx(85 / 66, abs=1e-3)
    assert summary["code2wav_ms_per_frame"]["hit_over_miss"] == 1.0


def test_a_run_that_packed_at_start_counts_as_a_miss_whatever_the_cache_said() -> None:
    summary = cache_speed.summarize([_run("miss", 60), _run("hit", 60)])
    assert summary["talker_step_ms"]["hit_over_miss"] == 1.0
