"""`bench` says which model its predictions are for: a published size, or a checkpoint the
cost model only paces as one (a tiny test checkpoint's figures are not its own)."""

from __future__ import annotations

from pathlib import Path

from omni_cpu.bench.report import prediction_line
from omni_cpu.bench.sweep import predicted_for
from omni_cpu.plan.footprint import footprint_for_model

ASSUMED = {"source": "built-in", "weights": "bfloat16", "assumptions": ["13 GB/s per core"]}


def test_a_published_size_is_named_as_what_the_predictions_are_for() -> None:
    assert predicted_for(footprint_for_model("0.6b")) == {
        "for_model": "0.6B",
        "measured_size": True,
    }
    assert predicted_for(footprint_for_model("1.7b-base"))["for_model"] == "1.7B"
    line = prediction_line({**ASSUMED, **predicted_for(footprint_for_model("0.6b"))})
    assert line == "predicted for the 0.6B: built-in constants, bfloat16 weights; 13 GB/s per core"


def test_a_tiny_checkpoints_predictions_say_they_are_a_published_sizes_pace(
    tiny_checkpoint: Path,
) -> None:
    label = predicted_for(footprint_for_model(str(tiny_checkpoint)))
    assert label == {"for_model": tiny_checkpoint.name, "measured_size": False}
    line = prediction_line({**ASSUMED, **label})
    assert line.startswith(f"predicted for {tiny_checkpoint.name} at the pace of the published")
    assert "a 0.6B-paced estimate" in line and line.endswith("; 13 GB/s per core")


def test_a_report_from_before_the_label_still_renders() -> None:
    assert prediction_line(ASSUMED) == (
        "model: built-in constants, bfloat16 weights; 13 GB/s per core"
    )
