"""benchmarks/compare_qwen_tts.py: arguments, the commands it plans, the RESULTS.md section.

Nothing here needs the reference venv or starts a model: the probe is a fixed
`omni-cpu probe --json`-shaped document, and running a command is an error.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


compare = load_script("benchmarks/compare_qwen_tts.py")
reference = load_script("benchmarks/qwen_tts_reference.py")

# What `omni-cpu probe --json` says on a 4-CPU avx2 box (the keys the script reads).
PROBE: dict[str, Any] = {
    "facts": {
        "architecture": "x86_64",
        "model_names": ["AMD EPYC"],
        "online_cpus": "0-3",
        "numa_nodes": [{"id": 0, "cpus": "0-3"}],
        "isa": ["avx", "avx2", "fma"],
        "memory_total_bytes": 25 * 2**30,
    },
    "profile": {
        "dtype": "float32",
        "machine": {"usable_cpus": "0-3"},
        "stages": [{"cpus": "0-2"}, {"cpus": "3"}],
    },
}


@pytest.fixture(autouse=True)
def checkpoint_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans do not depend on whether this checkout happens to hold checkpoints/0.6b."""
    monkeypatch.setattr(compare, "checkpoint_missing", lambda model: False)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe answers PROBE; any other subprocess fails the test."""

    def no_subprocess(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"ran a command: {args}")

    monkeypatch.setattr(compare, "run_probe", lambda command: PROBE)
    monkeypatch.setattr(compare.subprocess, "run", no_subprocess)


def _planned(*argv: str) -> dict[str, list[str]]:
    return compare.commands(compare.resolve(compare.parse_args(list(argv)), PROBE))


def test_defaults_are_all_usable_cpus_and_the_planned_dtype() -> None:
    settings = compare.resolve(compare.parse_args([]), PROBE)
    assert (settings.threads, settings.dtype, settings.frames) == (4, "float32", 124)
    assert settings.cpus is None
    assert settings.model == Path("checkpoints/0.6b")


def test_both_sides_get_the_same_text_speaker_frames_threads_and_dtype() -> None:
    planned = _planned("--frames", "8", "--text", "Two words.", "--speaker", "vivian")
    ref, omni = planned["reference"], planned["omni_cpu"]
    assert ref[ref.index("--text") + 1] == omni[omni.index("--text") + 1] == "Two words."
    assert ref[ref.index("--speaker") + 1] == omni[omni.index("--speaker") + 1] == "vivian"
    assert ref[ref.index("--frames") + 1] == omni[omni.index("--max-frames") + 1] == "8"
    assert ref[ref.index("--threads") + 1] == "4"
    assert ref[ref.index("--dtype") + 1] == "float32"
    assert omni[omni.index("--deploy-profile") + 1] == "auto"
    assert "--stream" in omni and "--json" in omni


def test_omni_cpu_weights_pass_through_and_the_reference_keeps_its_dtype() -> None:
    default = _planned()
    assert "--weights" not in default["omni_cpu"]
    planned = _planned("--weights", "int8")
    omni, ref = planned["omni_cpu"], planned["reference"]
    assert omni[omni.index("--weights") + 1] == "int8"
    assert ref[ref.index("--dtype") + 1] == "float32" and "--weights" not in ref


def test_fewer_threads_than_cpus_confines_every_command_to_the_first_cpus() -> None:
    planned = _planned("--threads", "2")
    assert all(command[:3] == ["taskset", "-c", "0-1"] for command in planned.values())


def test_a_dtype_other_than_the_plans_runs_omni_cpu_on_a_profile_with_that_dtype() -> None:
    planned = _planned("--dtype", "bfloat16")
    profile = planned["profile"]
    assert profile[profile.index("--dtype") + 1] == "bfloat16"
    written = profile[profile.index("--output") + 1]
    omni = planned["omni_cpu"]
    assert omni[omni.index("--deploy-profile") + 1] == written


def test_a_missing_checkpoint_is_made_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare, "checkpoint_missing", lambda model: True)
    planned = _planned("--model", str(tmp_path / "0.6b"))
    assert next(iter(planned)) == "make_checkpoint"
    assert planned["make_checkpoint"][-2:] == ["--out", str(tmp_path / "0.6b")]


def test_dry_run_prints_the_probe_and_both_sides_and_runs_nothing(
    offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare.main(["--dry-run", "--frames", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [shlex.split(line)[1] for line in lines] == [
        "probe",
        "benchmarks/qwen_tts_reference.py",
        "run",
    ]
    assert shlex.split(lines[1])[0] == "benchmarks/.venv-qwen-tts/bin/python"


def test_more_threads_than_cpus_is_one_line_and_exit_2(
    offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare.main(["--dry-run", "--threads", "5"]) == 2
    assert capsys.readouterr().err == (
        "error: --threads 5: only 4 CPUs are usable here (pass --threads 4 or fewer)\n"
    )


@pytest.mark.parametrize("argv", [["--frames", "0"], ["--runs", "0"], ["--text", " "]])
def test_nonsense_numbers_and_empty_text_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        compare.parse_args(argv)
    assert exit_info.value.code == 2


def test_json_output_is_read_after_any_chatter_on_stdout() -> None:
    noisy = 'Warning: flash-attn is not installed.\n{"rtf": 8.7}\n'
    assert compare.parse_json_output(noisy) == {"rtf": 8.7}
    assert compare.parse_json_output('{\n  "rtf": 1.5\n}\n') == {"rtf": 1.5}


def test_an_indented_json_result_is_found_between_log_lines() -> None:
    stdout = "INFO {'a': 1} started\n{'not': json}\n{\n  \"rtf\": 1.5,\n  \"x\": {}\n}\nbye\n"
    assert compare.parse_json_output(stdout) == {"rtf": 1.5, "x": {}}
    assert compare.parse_json_output("no result here\n") is None


def test_a_side_without_startup_gets_process_wall_minus_request_wall() -> None:
    runs = [({"wall_seconds": 4.0, "rtf": 0.4}, 30.0), ({"wall_seconds": 6.0, "rtf": 0.6}, 40.0)]
    merged = compare.median_result(runs)
    assert merged["wall_seconds"] == 5.0
    assert merged["rtf"] == 0.5
    assert merged["startup_seconds"] == 30.0


def test_ratios_are_reference_over_omni_cpu_and_absent_where_a_side_is_silent() -> None:
    rows = compare.compare({"rtf": 8.7, "peak_rss_bytes": 2**30}, {"rtf": 2.9})
    by_metric = {row["metric"]: row for row in rows}
    assert by_metric["rtf"]["ratio"] == pytest.approx(3.0)
    assert by_metric["peak_rss_bytes"]["ratio"] is None
    assert "frames" not in by_metric


RESULT: dict[str, Any] = {
    "date": "2026-01-02 03:04 UTC",
    "load_average": [0.12, 0.3, 0.41],
    "machine": compare.machine_facts(PROBE),
    "settings": {
        "model": "checkpoints/0.6b",
        "frames": 124,
        "text": "Hello there.",
        "speaker": "ryan",
        "threads": 4,
        "dtype": "float32",
        "runs": 3,
        "cpus": None,
    },
    "commands": {
        "probe": [".venv/bin/omni-cpu", "probe", "--json"],
        "reference": ["benchmarks/.venv-qwen-tts/bin/python", "ref.py", "--text", "Hello there."],
    },
    "reference": {"version": "0.1.1"},
    "rows": compare.compare(
        {"frames": 124, "rtf": 8.7, "ttfa_seconds": 86.3, "peak_rss_bytes": 3 * 2**30},
        {"frames": 124, "rtf": 2.9, "ttfa_seconds": 0.5},
    ),
}


def test_results_section_names_date_machine_load_and_settings() -> None:
    section = compare.results_section(RESULT)
    assert section.startswith(
        "## 2026-01-02 03:04 UTC: qwen-tts 0.1.1 reference vs omni-cpu, 124 frames\n"
    )
    assert "x86_64, AMD EPYC, 4 usable CPUs (0-3), 1 NUMA node(s), ISA avx avx2 fma." in section
    assert (
        "- Both sides: 4 threads, float32 (omni-cpu's plan: float32; its profile: auto)" in section
    )
    assert "- Load average before the run: 0.12 0.30 0.41." in section


def test_results_section_holds_the_exact_commands_as_shell_lines() -> None:
    section = compare.results_section(RESULT)
    block = section.split("```sh\n")[1].split("```")[0].splitlines()
    assert block == [
        ".venv/bin/omni-cpu probe --json",
        "benchmarks/.venv-qwen-tts/bin/python ref.py --text 'Hello there.'",
    ]


def test_results_section_table_has_both_sides_and_the_ratio() -> None:
    section = compare.results_section(RESULT)
    assert "| metric | qwen-tts | omni-cpu | qwen-tts ÷ omni-cpu |" in section
    assert "| codec frames | 124 | 124 | 1.00× |" in section
    assert "| real-time factor (wall ÷ audio) | 8.700 | 2.900 | 3.00× |" in section
    assert "| time to first audio | 86.300 s | 0.500 s | 172.60× |" in section
    assert "| peak RSS, all processes (sampled) | 3.00 GiB | — | — |" in section


def test_results_file_is_created_with_a_heading_and_appended_to(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    compare.append_results("## first\n", results)
    compare.append_results("## second\n", results)
    text = results.read_text()
    assert text.startswith("# Benchmark results\n")
    assert text.index("## first") < text.index("## second")


def test_reference_script_takes_dtype_aliases_and_rejects_zero_frames() -> None:
    args = reference.parse_args(["--model", "m", "--threads", "2", "--dtype", "bf16"])
    assert (args.dtype, args.frames, args.runs, args.warmup) == ("bfloat16", 124, 3, 1)
    with pytest.raises(SystemExit):
        reference.parse_args(["--model", "m", "--threads", "2", "--frames", "0"])


def test_omni_cpu_run_json_is_read_in_this_scripts_names_with_frames_from_audio() -> None:
    run_json = {"load_s": 61.2, "wall_s": 2.5, "audio_s": 0.64, "rtf": 3.9, "ttfa_s": 0.7}
    normalized = compare.normalize_omni_cpu(run_json)
    assert normalized["startup_seconds"] == 61.2
    assert normalized["wall_seconds"] == 2.5
    assert normalized["audio_seconds"] == 0.64
    assert normalized["ttfa_seconds"] == 0.7
    assert normalized["frames"] == 8


def test_rss_sampler_sums_a_process_and_its_children() -> None:
    def rss(pid: int) -> int:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")

    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            assert compare.TreeRssSampler(child.pid).sample() == rss(child.pid)
            assert (
                compare.TreeRssSampler(os.getpid()).sample()
                >= rss(child.pid) + rss(os.getpid()) // 2
            )
        finally:
            child.kill()


def test_a_profile_file_runs_omni_cpu_on_it_and_the_reference_in_its_dtype() -> None:
    planned = _planned("--deploy-profile", str(REPO / "profiles" / "zen5-kvm-2core.yaml"))
    omni, ref = planned["omni_cpu"], planned["reference"]
    assert omni[omni.index("--deploy-profile") + 1] == "profiles/zen5-kvm-2core.yaml"
    assert ref[ref.index("--dtype") + 1] == "bfloat16"
    assert "profile" not in planned


def test_a_dtype_that_contradicts_the_profile_file_is_refused() -> None:
    args = compare.parse_args(
        ["--deploy-profile", str(REPO / "profiles" / "zen5-kvm-2core.yaml"), "--dtype", "float32"]
    )
    with pytest.raises(compare.InputError, match="differs from"):
        compare.resolve(args, PROBE)


def test_results_section_flags_sides_that_emitted_different_frame_counts() -> None:
    rows = compare.compare({"frames": 8, "rtf": 9.2}, {"frames": 7, "rtf": 3.0})
    section = compare.results_section({**RESULT, "rows": rows})
    assert "- **The sides emitted different frame counts (qwen-tts 8, omni-cpu 7)" in section
    assert "different frame counts" not in compare.results_section(RESULT)


def test_a_checkpoints_folder_that_links_elsewhere_is_still_named_from_the_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, elsewhere = tmp_path / "repo", tmp_path / "disk"
    (elsewhere / "0.6b").mkdir(parents=True)
    repo.mkdir()
    (repo / "checkpoints").symlink_to(elsewhere)
    monkeypatch.setattr(compare, "REPO", repo)
    monkeypatch.chdir(repo)
    assert compare._repo_relative(Path("checkpoints/0.6b")) == Path("checkpoints/0.6b")
