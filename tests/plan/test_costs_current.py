"""One current number per constant: the cost model against the measurements it stands for.

benchmarks/calibrated.json names, for each cost-model constant of omni_cpu/plan/costs.py,
the benchmarks/RESULTS.md measurement it stands for. Each measurement here is set beside
the same number from the built-in cost model (0.6B, bf16 stages, no calibration: what an
uncalibrated plan predicts), and a test fails while they differ by more than the margin
the file states. A re-measured number changes calibrated.json; the constant follows.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from omni_cpu import weight_formats
from omni_cpu.plan import capacity, costs, listening, speed
from omni_cpu.plan.capacity import StageCores
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.speed import SHARED, SpeedInputs

REPO = Path(__file__).resolve().parents[2]
CALIBRATED = json.loads((REPO / "benchmarks" / "calibrated.json").read_text())
RESULTS = (REPO / "benchmarks" / "RESULTS.md").read_text()
FOOTPRINT = footprint_for_model("0.6b")
# The 2-core boxes the measurements come from: one talker core and one code2wav core,
# or both stages on both cores; the plan's 10-frame chunks, bench's 50-frame requests.
SPLIT = StageCores(1, 2)
SHARED_CORES = StageCores(SHARED, 2)
CHUNK_FRAMES = 10
BENCH_FRAMES = 50
REQUEST_FRAMES = 124  # the requests of the measured Zen 5 runs (RESULTS.md)


def _inputs(weights: str = "model", dtype: str = "bfloat16") -> SpeedInputs:
    return SpeedInputs(FOOTPRINT, dtype, dtype, weights)


def _step_ratio(weights: str) -> float:
    one = speed.talker_step_ms(1, _inputs(weights))
    return speed.talker_step_ms(1, _inputs(weights), streams=4) / one


def _decoder_chunk_ms(dtype: str, frames: str) -> float:
    per_frame, per_call = speed.code2wav_costs(_inputs(dtype=dtype))
    return per_frame * int(frames) + per_call


PROCESS_BYTES = {
    "talker_stage": "TALKER_STAGE_OVERHEAD_BYTES",
    "code2wav_stage": "CODE2WAV_STAGE_OVERHEAD_BYTES",
    "driver": "DRIVER_PROCESS_BYTES",
}

# `model` in calibrated.json -> the cost model's number for it ("name:arg:arg").
MODEL: dict[str, Callable[..., float]] = {
    "gemv_read_gb_s_one_core": lambda: costs.GEMV_GB_S_PER_CORE,
    "talker_step_ms": lambda weights, cores="1": speed.talker_step_ms(int(cores), _inputs(weights)),
    "four_stream_step_ratio": _step_ratio,
    "talker_step_spread": lambda: costs.TALKER_STEP_SPREAD,
    "first_audio_ms": lambda weights: capacity.ttfa_ms(SPLIT, _inputs(weights)),
    "four_stream_first_audio_ms": lambda weights: capacity.ttfa_ms(
        SPLIT, _inputs(weights), streams=4
    ),
    "small_op_us": lambda: costs.REFERENCE_SMALL_OP_US,
    "code2wav_decoder_ms_per_frame": lambda dtype: speed.code2wav_costs(_inputs(dtype=dtype))[0],
    "code2wav_decoder_chunk_ms": _decoder_chunk_ms,
    "code2wav_stage_ms_per_frame": lambda chunk: speed.code2wav_core_ms(int(chunk), _inputs()),
    "shared_rtf": lambda weights: capacity.request_rtf(
        SHARED_CORES, CHUNK_FRAMES, _inputs(weights), streams=1, frames=BENCH_FRAMES
    ),
    "process_overhead_gib": lambda which: getattr(costs, PROCESS_BYTES[which]) / costs.GIB,
    # An ISA class measured apart (costs.CPU_CLASS_SPEEDS): "class_...:<class>:<args>".
    "class_gemv_read_gb_s_one_core": lambda cpu_class: speed.talker_bandwidth_gb_s(
        1, dataclasses.replace(_inputs(), cpu_class=cpu_class)
    ),
    "class_talker_step_ms": lambda cpu_class, weights, streams="1": speed.talker_step_ms(
        1, dataclasses.replace(_inputs(weights), cpu_class=cpu_class), streams=int(streams)
    ),
    "class_code2wav_stage_ms_per_frame": lambda cpu_class, chunk: speed.code2wav_core_ms(
        int(chunk), dataclasses.replace(_inputs(), cpu_class=cpu_class)
    ),
    "class_first_audio_ms": lambda cpu_class, weights: capacity.ttfa_ms(
        SPLIT, dataclasses.replace(_inputs(weights), cpu_class=cpu_class)
    ),
    "class_request_rtf": lambda cpu_class, weights, frames: capacity.request_rtf(
        SPLIT,
        CHUNK_FRAMES,
        dataclasses.replace(_inputs(weights), cpu_class=cpu_class),
        streams=1,
        frames=int(frames),
    ),
    "class_safe_start_s": lambda cpu_class, weights, streams: _planned_safe_start_s(
        dataclasses.replace(_inputs(weights), cpu_class=cpu_class), int(streams)
    ),
}


def _planned_safe_start_s(inputs: SpeedInputs, streams: int) -> float:
    """p95 safe start of `streams` 124-frame streams on the chunk schedule planned for them."""
    schedule = listening.choose_schedule(SPLIT, inputs, CHUNK_FRAMES)
    return listening.safe_start_p95_s(SPLIT, inputs, schedule, streams, REQUEST_FRAMES)


def model_number(measurement: dict[str, Any]) -> float:
    name, *args = measurement["model"].split(":")
    return MODEL[name](*args)


def disagreement(measurement: dict[str, Any]) -> float:
    """How far the model's number is from the measurement, as a fraction of the measurement."""
    return model_number(measurement) / measurement["measured"] - 1


def _id(measurement: dict[str, Any]) -> str:
    return measurement["model"]


def results_entry(heading: str) -> str | None:
    """The text of RESULTS.md's `## heading` entry, up to the next one; None if absent."""
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", RESULTS, re.M | re.S)
    return found.group(1) if found else None


@pytest.mark.parametrize("measurement", CALIBRATED["measurements"], ids=_id)
def test_each_measurement_names_its_results_entry(measurement: dict[str, Any]) -> None:
    assert all(constant_exists(name) for name in measurement["constants"])
    if "entry" not in measurement:
        # A figure only an issue's text records: where it is, and how to measure it again.
        assert measurement["source"] and measurement["remeasure"]
        return
    entry = results_entry(measurement["entry"])
    assert entry is not None, f"RESULTS.md has no entry '## {measurement['entry']}'"
    if "section" in measurement:
        assert f"\n### {measurement['section']}\n" in entry


@pytest.mark.parametrize("miss", CALIBRATED["misses"], ids=lambda miss: miss["what"][:40])
def test_each_known_miss_names_its_results_entry(miss: dict[str, Any]) -> None:
    entry = results_entry(miss["entry"])
    assert entry is not None, f"RESULTS.md has no entry '## {miss['entry']}'"
    if "section" in miss:
        assert f"\n### {miss['section']}\n" in entry
    assert miss["why"]


def constant_exists(name: str) -> bool:
    """A constant of costs (`GEMV_GB_S_PER_CORE`), or of the weight-format registry
    (`weight_formats.FORMATS`: each format's reference step overhead)."""
    module, _, attribute = name.rpartition(".")
    return hasattr({"": costs, "weight_formats": weight_formats}[module], attribute)


def test_every_constant_the_cost_model_reads_stands_for_a_measurement_or_says_why_not() -> None:
    package = REPO / "omni_cpu" / "plan"
    read = {
        name
        for module in ("speed.py", "capacity.py", "listening.py")
        for name in re.findall(r"\bcosts\.([A-Z][A-Z0-9_]*)", (package / module).read_text())
    }
    measured = {name for m in CALIBRATED["measurements"] for name in m["constants"]}
    assert read - measured - set(CALIBRATED["not_measured"]) == set()
    assert all(hasattr(costs, name) for name in CALIBRATED["not_measured"])


@pytest.mark.parametrize("measurement", CALIBRATED["measurements"], ids=_id)
def test_each_constant_agrees_with_the_measurement_it_stands_for(
    measurement: dict[str, Any],
) -> None:
    margin = measurement.get("margin", CALIBRATED["margin"])
    off = disagreement(measurement)
    assert abs(off) <= margin, (
        f"{', '.join(measurement['constants'])}: the model says {model_number(measurement):.4g} "
        f"{measurement['unit']}, {where(measurement)} {measurement['measured']} "
        f"({off:+.0%}, margin {margin:.0%}): fit the constant to the measurement"
    )


def where(measurement: dict[str, Any]) -> str:
    """Where a measurement is recorded, in a few words."""
    if "entry" in measurement:
        return f"RESULTS.md '{measurement['entry']}'"
    return measurement["source"].split(":")[0]


def test_a_constant_that_drifts_past_the_margin_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    step = next(m for m in CALIBRATED["measurements"] if m["model"] == "talker_step_ms:int8")
    assert abs(disagreement(step)) <= CALIBRATED["margin"]
    # The constant as it was before the Xeon's runs of 2026-12-01 22:05-22:11.
    slow = dataclasses.replace(weight_formats.INT8, step_overhead_ms=13.0)
    monkeypatch.setitem(weight_formats.FORMATS, weight_formats.INT8.name, slow)
    assert disagreement(step) < -CALIBRATED["margin"]
