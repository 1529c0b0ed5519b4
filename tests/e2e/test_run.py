"""`omni-cpu run` end to end on the tiny checkpoint: real engines, real WAV files, real processes.

Two engine runs in all (sync, streaming; about a minute each on 2 cores), each
checked for its audio, its stage binding and its leftovers, plus one that fails in
its first stage, a third with int4 talker weights (x86 with AVX2), and the int8 and
int4 runs once more, on the packed weights their first start cached (the bad-input
checks start no engine: test_run_parts.py). The sync run is what a user sees (no
--json): the checkpoint's weights, the per-step log, and no engine chatter.
The streaming run is --json --verbose with int8 talker weights, so both weight
paths produce audio and the engines' own logs show. Both decode
code2wav with omni-cpu's streaming decode (the default): a 1-frame chunk, then a
ragged 11-frame last chunk.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from tests.helpers.audio import FRAME, read_wav
from tests.helpers.engines import (
    Run,
    live_pids_with_token,
    needs_runtime,
    run_omni_cpu,
)
from tests.helpers.profiles import with_talker

pytestmark = [pytest.mark.e2e, needs_runtime]

MAX_FRAMES = "12"


def none_left(token: str, within_s: float = 5.0) -> bool:
    """No process of the run lives `within_s` after it exited (its watchdog sweeps last)."""
    deadline = time.monotonic() + within_s
    while live_pids_with_token(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    return live_pids_with_token(token) == []


@pytest.fixture(scope="module")
def stage_cpus(tiny_checkpoint: Path) -> dict[int, str]:
    """The CPUs `--deploy-profile auto` gives each stage here (from the dry run)."""
    plan = run_omni_cpu(
        "run", "--model", str(tiny_checkpoint), "--text", "Hi", "--dry-run", "--json"
    ).json()
    return {
        stage["stage_id"]: stage["env"]["VLLM_CPU_OMP_THREADS_BIND"] for stage in plan["stages"]
    }


def _synthesize(
    checkpoint: Path,
    out: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    as_json: bool = True,
) -> Run:
    run = run_omni_cpu(
        "run",
        "--model",
        str(checkpoint),
        "--deploy-profile",
        "auto",
        "--text",
        "Hello from the CPU.",
        "--speaker",
        "vivian",
        "--max-frames",
        MAX_FRAMES,
        "--out",
        str(out),
        *(["--json"] if as_json else []),
        *extra,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def sync_run(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    out = tmp_path_factory.mktemp("sync") / "hello.wav"
    steps = out.parent / "steps"
    run = _synthesize(tiny_checkpoint, out, env={"OMNI_CPU_STEP_LOG": str(steps)}, as_json=False)
    return run, out


@pytest.fixture(scope="module")
def packed_weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The quantized runs' own packed-weight cache (empty before their first start)."""
    return {"OMNI_CPU_WEIGHT_CACHE": str(tmp_path_factory.mktemp("packed-weights"))}


# --verbose lets the test see the talker worker report its int8/int4 layers (INFO).
INT8_STREAM = ("--stream", "--weights", "int8", "--verbose")
INT4 = ("--weights", "int4", "--verbose")


@pytest.fixture(scope="module")
def stream_run(
    tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, packed_weights: dict
) -> tuple[Run, Path]:
    out = tmp_path_factory.mktemp("stream") / "hello.wav"
    return _synthesize(tiny_checkpoint, out, *INT8_STREAM, env=packed_weights), out


def _skip_without_int4() -> None:
    from omni_cpu.kernels import gemv

    if not (gemv.cpu_supports() or gemv.avx2_cpu_supports()):
        pytest.skip("--weights int4 needs AVX2 (the plan refuses it)")


@pytest.fixture(scope="module")
def int4_run(
    tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, packed_weights: dict
) -> tuple[Run, Path]:
    _skip_without_int4()
    out = tmp_path_factory.mktemp("int4") / "hello.wav"
    return _synthesize(tiny_checkpoint, out, *INT4, env=packed_weights), out


@pytest.fixture(scope="module")
def second_starts(
    tiny_checkpoint: Path,
    tmp_path_factory: pytest.TempPathFactory,
    packed_weights: dict,
    stream_run: tuple[Run, Path],
    int4_run: tuple[Run, Path],
) -> dict[str, tuple[tuple[Run, Path], tuple[Run, Path]]]:
    """The int8 and int4 runs again, same arguments: (first start, second start) each."""
    again = {}
    for fmt, args, first in (("int8", INT8_STREAM, stream_run), ("int4", INT4, int4_run)):
        out = tmp_path_factory.mktemp(f"{fmt}-again") / "hello.wav"
        again[fmt] = (first, (_synthesize(tiny_checkpoint, out, *args, env=packed_weights), out))
    return again


def _assert_speech_shaped_wav(path: Path) -> None:
    rate, channels, samples = read_wav(path)
    assert (rate, channels) == (24_000, 1)
    assert samples.size > 0
    assert samples.size % FRAME == 0
    assert np.isfinite(samples).all()
    assert np.abs(samples).max() > 0.0


@pytest.fixture(params=["sync_run", "stream_run"], ids=["sync", "stream"])
def each_run(request: pytest.FixtureRequest) -> tuple[Run, Path]:
    """The sync run, then the streaming run: what holds for both is checked on each."""
    return request.getfixturevalue(request.param)


def test_run_writes_24khz_mono_whole_frames_of_sound(each_run: tuple[Run, Path]) -> None:
    _assert_speech_shaped_wav(each_run[1])


def test_max_frames_gives_exactly_that_many_frames(sync_run: tuple[Run, Path]) -> None:
    # Random weights sample end-of-speech about once in 2049 steps, so an early stop
    # within 12 frames happens in about 0.5 % of runs; a cap off by one fails always.
    _, _, samples = read_wav(sync_run[1])
    assert samples.size == int(MAX_FRAMES) * FRAME


def test_stream_run_reports_timings_for_the_audio_it_wrote(stream_run: tuple[Run, Path]) -> None:
    run, path = stream_run
    report = run.json()
    _, _, samples = read_wav(path)
    assert report["outputs"][0]["samples"] == samples.size
    assert report["audio_s"] == pytest.approx(samples.size / 24_000, abs=1e-3)
    assert report["rtf"] == pytest.approx(report["wall_s"] / report["audio_s"], rel=1e-2)


def test_each_stage_worker_is_bound_to_its_profile_cpus(
    sync_run: tuple[Run, Path], stage_cpus: dict[int, str]
) -> None:
    run, _ = sync_run
    everything = set(os.sched_getaffinity(0))
    for stage_id, cpus in stage_cpus.items():
        wanted = set(parse_cpu_list(cpus))
        seen = run.thread_cpus_by_stage.get(stage_id)
        assert seen, f"no engine core of stage {stage_id} was seen"
        masks = [set(parse_cpu_list(text)) for text in seen]
        # vLLM's CPU worker pins each OpenMP thread to one listed CPU; other threads
        # keep the process's whole mask. Any other mask is a thread bound elsewhere.
        strays = [m for m in masks if not (m == everything or (len(m) == 1 and m <= wanted))]
        assert not strays, f"stage {stage_id}: threads on {[format_cpu_list(m) for m in strays]}"
        pinned = {cpu for m in masks if len(m) == 1 for cpu in m}
        assert pinned == wanted, (
            f"stage {stage_id}: OpenMP threads pinned to {format_cpu_list(pinned)}, "
            f"the profile says {cpus}"
        )


def test_healthy_run_prints_a_few_lines_of_its_own_and_no_error_or_warning(
    sync_run: tuple[Run, Path],
) -> None:
    run, path = sync_run
    lines = (run.stdout + run.stderr).splitlines()
    assert len(lines) <= 10, run.stderr[-3000:]
    assert not [line for line in lines if re.search(r"ERROR|WARNING|Warning", line)], lines
    assert f"wrote {path}" in run.stdout


def test_verbose_run_shows_the_engines_own_logs(stream_run: tuple[Run, Path]) -> None:
    run, _ = stream_run
    assert re.search(r"INFO .*Initializing a V1 LLM engine", run.stderr), run.stderr[-3000:]
    run.json()  # stdout is still only the JSON document


def test_run_json_reports_start_up_phase_by_phase(stream_run: tuple[Run, Path]) -> None:
    report = stream_run[0].json()
    startup = report["startup"]
    phases = {"runtime_import_s", "engines_s", "prompt_tokenizer_s"}
    if report["stage_start"] == "fork":  # the driver re-executed itself to fork its stages
        phases.add("driver_relaunch_s")
    assert set(startup["phases"]) == phases  # each phase says what it is
    assert all(startup[name] > 0 for name in phases)
    assert startup["total_s"] == pytest.approx(sum(startup[name] for name in phases), abs=0.01)
    # Each stage's own phases, measured in its process (inside engines_s).
    talker, code2wav = startup["stages"]["talker"], startup["stages"]["code2wav"]
    assert {"load_model_s", "weights_load_s", "pack_s", "weight_cache"} <= set(talker)
    assert talker["weights"] == "int8"
    assert 0 < code2wav["load_model_s"] < startup["engines_s"]
    assert set(startup["stage_phases"]) == set(talker) | set(code2wav)


def test_stages_are_forked_from_the_driver_where_intel_openmp_is_preloaded(
    sync_run: tuple[Run, Path], tiny_checkpoint: Path
) -> None:
    from omni_cpu.launch.plan import make_launch_plan
    from omni_cpu.launch.relaunch import fork_blocker

    # The same plan the run made (auto, this machine). A forked stage's /proc environ is
    # its driver's start environment; a spawned one's its own (the harness compares them).
    plan = make_launch_plan(str(tiny_checkpoint))
    if fork_blocker(plan, this_process=False) is not None:
        pytest.skip(fork_blocker(plan, this_process=False))
    run, _ = sync_run
    assert run.stage_starts == {"fork"}, run.stage_starts


def test_a_stage_that_fails_to_start_still_shows_its_own_error(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from omni_cpu.plan import plan_for_machine
    from omni_cpu.profile import save_profile

    _, profile = plan_for_machine(str(tiny_checkpoint))
    # 4 KiB of KV cache cannot hold one talker request: vLLM refuses in stage 0's engine core.
    path = tmp_path / "no-kv.yaml"
    save_profile(with_talker(profile, kv_cache_memory_bytes=4096), path)
    out = tmp_path / "never.wav"
    run = run_omni_cpu(
        "run",
        "--model",
        str(tiny_checkpoint),
        "--deploy-profile",
        str(path),
        "--text",
        "Hi",
        "--max-frames",
        "4",
        "--out",
        str(out),
    )
    assert run.returncode == 4
    assert "ValueError: No available memory for the cache blocks" in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("error: starting the stage engines")
    assert not out.exists()


def test_no_stage_process_outlives_the_run(each_run: tuple[Run, Path]) -> None:
    assert none_left(each_run[0].token)


def test_stream_run_decodes_each_frame_once_into_exactly_its_frames(
    stream_run: tuple[Run, Path],
) -> None:
    run, path = stream_run
    assert "code2wav: streaming decode" in run.stderr, run.stderr[-3000:]
    _, _, samples = read_wav(path)
    # The last chunk (11 frames) is decoded as it is, not padded to 25: exactly
    # the frames asked for come out (early end of speech: see the sync run's test).
    assert samples.size == int(MAX_FRAMES) * FRAME


def test_stream_run_reports_time_to_first_audio(stream_run: tuple[Run, Path]) -> None:
    report = stream_run[0].json()
    assert report["stream"] is True
    assert report["outputs"][0]["chunks"] >= 1
    assert 0 < report["ttfa_s"] <= report["wall_s"]


def test_sync_run_logs_each_talker_step_with_its_code_predictor_time(
    sync_run: tuple[Run, Path],
) -> None:
    _run, out = sync_run
    (talker_log,) = (out.parent / "steps").glob("talker-*.jsonl")
    steps = [json.loads(line) for line in talker_log.read_text().splitlines()]
    decode = [step for step in steps if step["code_predictor_ms"] > 0]
    # One prefill and one decode step per frame after the first: the cached code
    # predictor ran (and was timed) once per decode step.
    assert len(decode) >= int(MAX_FRAMES) - 1
    assert all(step["step_ms"] >= step["code_predictor_ms"] for step in decode)
    assert list((out.parent / "steps").glob("code2wav-*.jsonl"))


def _layers_by_kernel(run: Run, weights: str) -> dict[str, list[tuple[str, int]]]:
    """The run's `linear kernels` line: {"talker" and "predictor": [(kernel, layers), ...]}."""
    # omni_cpu.models.linears.describe: "talker 28 gemv-w8a8; predictor 20 gemv-w8a8, ..."
    line = rf"linear kernels \({weights} weights\): talker (.*?); predictor (.*)"
    found = re.search(line, run.stderr)
    assert found, run.stderr[-3000:]
    return {
        model: [(kernel, int(n)) for n, kernel in re.findall(r"(\d+) ([\w-]+)", side)]
        for model, side in zip(("talker", "predictor"), found.groups(), strict=True)
    }


def test_int8_stream_run_quantized_the_talker_and_its_code_predictor(
    stream_run: tuple[Run, Path],
) -> None:
    for model, layers in _layers_by_kernel(stream_run[0], "int8").items():
        int8 = sum(n for kernel, n in layers if kernel in ("gemv-w8a8", "fbgemm-int8"))
        assert int8 > 0, (model, layers)


def test_int4_run_quantized_both_models_and_wrote_sound(int4_run: tuple[Run, Path]) -> None:
    run, out = int4_run
    _assert_speech_shaped_wav(out)
    for model, layers in _layers_by_kernel(run, "int4").items():
        int4 = sum(n for kernel, n in layers if kernel in ("gemv-w4a8", "gemv-avx2-w4a8"))
        assert int4 > 0, (model, layers)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_a_second_start_maps_the_packed_weights_and_writes_the_same_audio(
    second_starts: dict, fmt: str
) -> None:
    (first, first_out), (again, again_out) = second_starts[fmt]
    before = first.json()["startup"]["stages"]["talker"]
    after = again.json()["startup"]["stages"]["talker"]
    assert (before["weights"], before["weight_cache"]) == (fmt, "miss")
    assert before["packed_layers"] > 0
    # Nothing quantized or packed again: every layer mapped from the first start's entry.
    assert after["weight_cache"] == "hit"
    assert (after["packed_layers"], after["cached_layers"]) == (0, before["packed_layers"])
    assert after["skipped_loads"] == before["packed_layers"]  # not copied from the checkpoint
    assert again_out.read_bytes() == first_out.read_bytes()
