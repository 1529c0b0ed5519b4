"""One real `omni-cpu bench` on the tiny checkpoint: --json and --plot (one engine start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.engines import needs_runtime, run_omni_cpu

pytestmark = [pytest.mark.e2e, needs_runtime]

LEVEL_KEYS = {
    "concurrency",
    "requests",
    "audio_s",
    "wall_s",
    "ttfa_p50_s",
    "ttfa_p95_s",
    "rtf_p50",
    "rtf_p95",
    "audio_s_per_wall_s",
    "talker_ms_per_frame",
    "talker_step_ms",
    "talker_step_ms_p95",
    "code_predictor_ms",
    "code2wav_ms_per_frame",
    "frames_per_request_p50",
    "busy_fraction",
    "stage_cpu_s",
    "peak_rss_bytes",
    "predicted_rtf",
    "predicted_ttfa_s",
    "predicted_safe_start_s",
    "safe_start_p50_s",
    "safe_start_p95_s",
    "safe_start_after_first_audio_p95_s",
    "play_buffer_ms",
    "stalled_streams",
    "gaps_p95",
    "stall_s_p95",
    "streams",
}


@pytest.fixture(scope="module")
def plot_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plot") / "bench.png"


@pytest.fixture(scope="module")
def bench_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bench's temp directory (TMPDIR): what it leaves there is checked."""
    return tmp_path_factory.mktemp("bench-temp")


@pytest.fixture(scope="module")
def bench(tiny_checkpoint: Path, plot_path: Path, bench_temp: Path) -> dict:
    run = run_omni_cpu(
        "bench",
        "--model",
        str(tiny_checkpoint),
        "--concurrency",
        "1,2",
        "--frames",
        "4",
        "--warmup",
        "0",
        "--plot",
        str(plot_path),
        "--json",
        env={"TMPDIR": str(bench_temp)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.json()


def test_bench_json_has_one_entry_per_level_in_order(bench: dict) -> None:
    assert [level["concurrency"] for level in bench["levels"]] == [1, 2]
    assert [level["requests"] for level in bench["levels"]] == [1, 2]


def test_every_level_reports_every_metric(bench: dict) -> None:
    for level in bench["levels"]:
        assert set(level) == LEVEL_KEYS


def test_every_request_is_cut_at_the_same_fixed_length(bench: dict) -> None:
    # max_tokens=4 delivered 3 frames of audio here (vLLM-Omni 0.30.0): the bench
    # reports what arrived; what matters is that no request stops on its own.
    lengths = {level["frames_per_request_p50"] for level in bench["levels"]}
    assert len(lengths) == 1
    (length,) = lengths
    assert 2 <= length <= 4
    for level in bench["levels"]:
        assert level["audio_s"] == pytest.approx(level["requests"] * length * 0.08)


def test_peak_rss_is_reported_per_stage_and_for_the_driver(bench: dict) -> None:
    # Stages that share their CPUs (the plan on a 2-core bf16 box) are one group, "a+b".
    for level in bench["levels"]:
        groups = set(level["peak_rss_bytes"]) - {"driver"}
        assert "driver" in level["peak_rss_bytes"]
        assert sorted(name for group in groups for name in group.split("+")) == sorted(
            bench["stage_cpus"]
        )
        assert all(value > 0 for value in level["peak_rss_bytes"].values())


def test_bandwidth_and_weight_streaming_are_reported(bench: dict) -> None:
    assert bench["memory_bandwidth"]["bytes_per_s"] > 0
    assert bench["weight_streaming"]["talker_weight_bytes"] > 0
    assert set(bench["derivations"]) >= {"ttfa", "rtf", "talker_ms_per_frame"}


def test_stage_times_come_from_inside_the_workers(bench: dict) -> None:
    # The step log (OMNI_CPU_STEP_LOG, set by bench): every level ran decode steps
    # with the code predictor inside them, and code2wav decoded something.
    for level in bench["levels"]:
        assert level["talker_step_ms"] > 0
        assert level["talker_step_ms_p95"] >= level["talker_step_ms"]
        assert 0 < level["code_predictor_ms"] <= level["talker_step_ms"]
        assert level["code2wav_ms_per_frame"] > 0
    assert bench["weights"] == "model"


def test_plot_is_written_as_a_png(bench: dict, plot_path: Path) -> None:
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_start_up_is_reported_phase_by_phase(bench: dict) -> None:
    startup = bench["startup"]
    assert startup["engines_s"] > 0 and startup["runtime_import_s"] > 0
    assert startup["total_s"] >= startup["engines_s"]
    # What each stage measured in its own process lies within engines_s.
    assert 0 < startup["stages"]["talker"]["load_model_s"] < startup["engines_s"]
    assert startup["stages"]["code2wav"]["load_model_s"] > 0


def test_every_level_carries_the_cost_models_prediction_beside_the_measurement(bench: dict) -> None:
    for level in bench["levels"]:
        assert level["predicted_rtf"] > 0 and level["predicted_ttfa_s"] > 0
    one, two = bench["levels"]
    # Two streams share the talker's step and code2wav: neither faster nor sooner than one.
    assert two["predicted_rtf"] >= one["predicted_rtf"]
    assert two["predicted_ttfa_s"] >= one["predicted_ttfa_s"]
    prediction = bench["prediction"]
    assert prediction["source"] in ("built-in", "calibrated")
    assert prediction["weights"] in ("bfloat16", "float32")
    assert any("GB/s" in line for line in prediction["assumptions"])
    assert {"predicted_rtf", "predicted_ttfa_s"} <= set(bench["derivations"])


def test_the_table_shows_measured_over_predicted(bench: dict) -> None:
    text = _table(bench)
    assert "RTF / model" in text and "TTFA / model" in text
    one = bench["levels"][0]
    assert f"{one['rtf_p50'] / one['predicted_rtf']:.2f}x ({one['predicted_rtf']:.2f})" in text


def test_each_stream_reports_its_chunks_and_what_a_listener_hears(bench: dict) -> None:
    for level in bench["levels"]:
        assert len(level["streams"]) == level["requests"]
        assert level["play_buffer_ms"] == 250
        for stream in level["streams"]:
            chunks = stream["chunks"]  # [arrival s, audio offset s, audio s]
            assert [at for at, _, _ in chunks] == sorted(at for at, _, _ in chunks)
            offsets = [round(sum(c[2] for c in chunks[:i]), 3) for i in range(len(chunks))]
            assert [round(offset, 3) for _, offset, _ in chunks] == offsets
            # The safe start is the largest arrival minus offset: at least first audio.
            assert stream["safe_start_s"] == pytest.approx(
                max(at - offset for at, offset, _ in chunks), abs=1e-3
            )
            assert stream["safe_start_s"] >= chunks[0][0] - 1e-3
            assert stream["gaps"] >= 0 and stream["stall_s"] >= 0
        assert level["safe_start_p95_s"] >= level["safe_start_p50_s"] > 0
        assert 0 <= level["stalled_streams"] <= level["requests"]
        assert level["predicted_safe_start_s"] > 0
    text = _table(bench)
    assert "safe start p95 s" in text and "stalled streams" in text


@pytest.fixture(scope="module")
def capacity_run(tiny_checkpoint: Path) -> dict:
    run = run_omni_cpu(
        "bench",
        "--model",
        str(tiny_checkpoint),
        "--find-capacity",
        "--frames",
        "4",
        "--warmup",
        "0",
        "--json",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.json()


def test_find_capacity_raises_the_streams_until_the_safe_start_limit_or_max_num_seqs(
    capacity_run: dict,
) -> None:
    capacity = capacity_run["capacity"]
    tried = {int(n): s for n, s in capacity["tried"].items()}
    levels = [level["concurrency"] for level in capacity_run["levels"]]
    assert levels == sorted(tried)
    assert levels[0] == 1
    under = [n for n, s in tried.items() if s is not None and s <= capacity["safe_start_limit_s"]]
    assert capacity["stall_free_streams"] == max(under, default=0)
    over = [n for n in tried if n not in under]
    # The edge is found: the next level over was measured over, or the search stopped at
    # the most streams the talker runs at once.
    assert capacity["stall_free_streams"] + 1 in over or (
        capacity["stall_free_streams"] == capacity["max_streams"]
    )
    assert "stall-free streams" in _table(capacity_run)


def _table(data: dict) -> str:
    from rich.console import Console

    from omni_cpu.bench.report import print_bench

    console = Console(record=True, width=200)
    print_bench(console, data)
    return console.export_text()


def test_bench_removes_its_step_log_folder(bench: dict, bench_temp: Path) -> None:
    assert list(bench_temp.glob("omni-cpu-steps-*")) == []
