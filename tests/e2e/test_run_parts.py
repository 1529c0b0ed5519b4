"""The parts of `omni-cpu run` that need no engine: texts, requests, the WAV writer, the dry run."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import pytest

from omni_cpu.errors import InputError, ModelError
from omni_cpu.speech.request import ModelInfo, build_requests, read_model_info, read_texts
from tests.helpers.engines import OMNI_CPU, run_omni_cpu
from tests.helpers.profiles import with_talker

INFO = ModelInfo(Path("m"), ("ryan", "vivian"), ("chinese", "english"), "0b6")


def test_text_file_gives_one_utterance_per_non_empty_line(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("Hello.\n\n  Second line  \n")
    assert read_texts(None, lines) == ["Hello.", "Second line"]


def test_text_and_text_file_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        read_texts("Hi", tmp_path / "x.txt")


def test_requests_carry_vllm_omni_additional_information() -> None:
    (request,) = build_requests(INFO, ["Hi"], "Ryan", "english", None, 12)
    assert request.additional_information() == {
        "task_type": ["CustomVoice"],
        "text": ["Hi"],
        "speaker": ["ryan"],
        "language": ["English"],
        "instruct": [""],
        "max_new_tokens": [12],
    }


def test_unknown_language_lists_the_languages() -> None:
    with pytest.raises(InputError) as refused:
        build_requests(INFO, ["Hi"], "ryan", "klingon")
    assert refused.value.fix == "use auto or one of: chinese, english"


def test_instruct_is_refused_by_the_06b_model() -> None:
    with pytest.raises(InputError, match=r"0\.6B"):
        build_requests(INFO, ["Hi"], "ryan", instruct="Cheerfully.")


def test_a_directory_without_config_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no config\.json"):
        read_model_info(str(tmp_path))


def test_a_hub_id_not_in_the_cache_passes_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # the machine's own cache may hold it
    assert read_model_info("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").path is None


def test_wav_appears_only_on_commit(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from omni_cpu.speech.wav import AtomicWavWriter

    writer = AtomicWavWriter(tmp_path / "a.wav")
    writer.append(np.full(1920, 0.5, dtype=np.float32))
    assert not (tmp_path / "a.wav").exists()
    writer.append(np.zeros(1920, dtype=np.float32))
    writer.commit()
    with wave.open(str(tmp_path / "a.wav")) as handle:
        assert (handle.getframerate(), handle.getnchannels(), handle.getnframes()) == (
            24000,
            1,
            3840,
        )
    assert [p.name for p in tmp_path.iterdir()] == ["a.wav"]


def test_aborted_wav_leaves_nothing(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from omni_cpu.speech.wav import AtomicWavWriter

    writer = AtomicWavWriter(tmp_path / "a.wav")
    writer.append(np.ones(1920, dtype=np.float32))
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_dry_run_prints_each_stage_env_and_engine_args(
    tiny_checkpoint: Path,
) -> None:
    run = run_omni_cpu(
        "run",
        "--model",
        str(tiny_checkpoint),
        "--text",
        "Hi",
        "--dry-run",
        "--json",
        timeout_s=120,
    )
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert [stage["stage_id"] for stage in plan["stages"]] == [0, 1]
    for stage in plan["stages"]:
        assert "VLLM_CPU_OMP_THREADS_BIND" in stage["env"]
        assert stage["engine_args"]["kv_cache_memory_bytes"] > 0
        assert stage["engine_args"]["async_scheduling"] is False


def _lowered_open_files(limit: int) -> None:
    import resource

    resource.setrlimit(
        resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )


def test_many_outputs_are_opened_one_at_a_time(tmp_path: Path) -> None:
    import numpy as np

    from omni_cpu.speech.wav import WavOutputs

    paths = [tmp_path / f"out-{index:04d}.wav" for index in range(1500)]
    outputs = WavOutputs(paths)
    assert outputs.open_count == 1  # the folder's first file: a full disk fails here
    assert list(tmp_path.iterdir()) == []
    for index in range(len(paths)):
        outputs.append(index, np.full(240, 0.1, dtype=np.float32))
        outputs.commit(index)
        assert outputs.open_count == 0
    with wave.open(str(paths[-1])) as done:
        assert done.getnframes() == 240
    assert len(list(tmp_path.iterdir())) == len(paths)


def test_too_many_open_files_is_named_as_the_cause(tmp_path: Path) -> None:
    import errno

    from omni_cpu.speech.wav import write_fix

    assert "ulimit -n" in write_fix(OSError(errno.EMFILE, "Too many open files"))
    assert "free space" in write_fix(OSError(errno.ENOSPC, "No space left on device"))
    assert "free space" not in write_fix(OSError(errno.EROFS, "Read-only file system"))


def test_a_10000_line_text_file_fits_under_ulimit_n_1024(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    pytest.importorskip("vllm_omni", reason="the prompt check before the engines is vLLM-Omni's")
    import subprocess
    import time

    lines = tmp_path / "lines.txt"
    # The last line is over the talker's context: the run stops at the check made
    # before any engine starts, after every output was planned.
    lines.write_text("Hello there.\n" * 10_000 + "😀" * 1100 + "\n")  # 10x the limit
    out = tmp_path / "out"
    started = time.monotonic()
    done = subprocess.run(
        [OMNI_CPU, "run", "--model", str(tiny_checkpoint), "--text-file", str(lines),
         "--out", str(out / "line.wav")],
        capture_output=True, text=True, timeout=300, preexec_fn=lambda: _lowered_open_files(1024),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "utterance 10001" in done.stderr and "max_model_len" in done.stderr
    assert "open files" not in done.stderr and "Traceback" not in done.stderr
    assert list(out.iterdir()) == []
    assert time.monotonic() - started < 240


# ---- bad input: one line, non-zero exit, no engine started -----------------------------


def _refused(*args: str) -> str:
    run = run_omni_cpu("run", *args, timeout_s=120)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_unknown_speaker_is_refused_with_the_speaker_list(tiny_checkpoint: Path, tmp_path) -> None:
    line = _refused("--model", str(tiny_checkpoint), "--text", "Hi", "--speaker", "bob")
    assert "unknown speaker 'bob'" in line
    assert "aiden" in line and "vivian" in line and "ryan" in line


def test_empty_text_is_refused(tiny_checkpoint: Path) -> None:
    assert "text is empty" in _refused("--model", str(tiny_checkpoint), "--text", "   ")


def test_missing_model_path_is_refused(tmp_path: Path) -> None:
    line = _refused("--model", str(tmp_path / "no-such-model"), "--text", "Hi")
    assert line.startswith(f"error: no folder {tmp_path / 'no-such-model'} (")


def test_profile_whose_shape_this_machine_cannot_bind_is_refused(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from omni_cpu.cpulist import format_cpu_list
    from omni_cpu.plan import plan_for_machine
    from omni_cpu.profile import save_profile

    _, profile = plan_for_machine(str(tiny_checkpoint))
    # A talker planned elsewhere on more cores than this process may use: no binding fits.
    first = max(os.cpu_count() or 1, 4095) + 1
    absent = format_cpu_list(range(first, first + len(os.sched_getaffinity(0)) + 1))
    path = tmp_path / "elsewhere.yaml"
    save_profile(with_talker(profile, cpus=absent), path)
    line = _refused("--model", str(tiny_checkpoint), "--deploy-profile", str(path), "--text", "Hi")
    assert "shape does not fit" in line
    assert f"CPUs {absent} (replica 0 talker) not here" in line
