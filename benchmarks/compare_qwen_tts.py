"""Side by side: the official `qwen-tts` reference against omni-cpu's pipeline.

Same checkpoint, text, speaker, frame count, CPUs and dtype for both; prints each
metric with the ratio reference ÷ omni-cpu (above 1: omni-cpu is faster / smaller)
and appends a dated section to benchmarks/RESULTS.md. Run it from omni-cpu's venv:

    .venv/bin/python benchmarks/compare_qwen_tts.py                 # 124 frames, all CPUs
    .venv/bin/python benchmarks/compare_qwen_tts.py --frames 8 --runs 1 --no-record
    .venv/bin/python benchmarks/compare_qwen_tts.py --dry-run       # the commands only

The reference runs in benchmarks/.venv-qwen-tts (benchmarks/setup-qwen-tts-venv.sh).
See benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.errors import InputError, OmniCpuError, RuntimeMissingError, StageError
from omni_cpu.process import proctree

REPO = Path(__file__).resolve().parents[1]
REFERENCE_PYTHON = Path("benchmarks/.venv-qwen-tts/bin/python")
REFERENCE_SCRIPT = Path("benchmarks/qwen_tts_reference.py")
RESULTS_FILE = Path("benchmarks/RESULTS.md")
DEFAULT_MODEL = Path("checkpoints/0.6b")
DEFAULT_TEXT = "Hello there. This is a test of speech synthesis on a CPU server."
QUIET_LOAD = 0.6  # 1-minute load average above which timings are not worth recording

# (key, label, unit); each side's JSON carries these keys. Ratios are reference ÷ omni-cpu.
METRICS = (
    ("frames", "codec frames", ""),
    ("audio_seconds", "audio", "s"),
    ("ttfa_seconds", "time to first audio", "s"),
    ("wall_seconds", "request wall time", "s"),
    ("rtf", "real-time factor (wall ÷ audio)", ""),
    ("startup_seconds", "start-up (imports, load; not in RTF)", "s"),
    ("peak_rss_bytes", "peak RSS, all processes (sampled)", "GiB"),
)


@dataclass
class Settings:
    """Everything both sides are run with, resolved from arguments and the probe."""

    model: Path
    frames: int
    text: str
    speaker: str
    threads: int
    dtype: str
    runs: int
    planned_dtype: str
    cpus: str | None  # a taskset list when --threads is below the usable CPUs
    omni_cpu: str = ".venv/bin/omni-cpu"
    profile: str = "auto"  # or a profile file (--deploy-profile, or one with --dtype's dtype)
    need_checkpoint: bool = False
    weights: str = "model"  # omni-cpu's --weights: model (same as the reference) or int8
    machine: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; defaults that depend on the machine stay None until resolve()."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="checkpoint directory")
    parser.add_argument("--frames", type=int, default=124, help="codec frames (124 ≈ 9.9 s)")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--speaker", default="ryan")
    parser.add_argument("--threads", type=int, help="default: all usable CPUs")
    parser.add_argument(
        "--dtype", choices=("bfloat16", "float32"), help="default: what omni-cpu probe plans"
    )
    parser.add_argument(
        "--deploy-profile",
        default="auto",
        help="omni-cpu's profile: auto (plan this machine) or a profile YAML; its dtype is used",
    )
    parser.add_argument(
        "--weights",
        choices=("model", "int8"),
        default="model",
        help="omni-cpu's talker weights (model: the same dtype as the reference)",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed requests per side")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--no-record", action="store_true", help=f"do not append to {RESULTS_FILE}")
    args = parser.parse_args(argv)
    for name in ("frames", "runs", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    if not args.text.strip():
        parser.error("--text must not be empty")
    return args


def probe_command(omni_cpu: str, model: Path) -> list[str]:
    return [omni_cpu, "probe", "--json", "--model", str(model)]


def run_probe(command: list[str]) -> dict[str, Any]:
    """`omni-cpu probe --json`: the machine's facts and the plan for it."""
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StageError(f"{shlex.join(command)} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def machine_facts(probe: dict[str, Any]) -> dict[str, Any]:
    """The facts a RESULTS.md section names, from `omni-cpu probe --json`."""
    facts, profile = probe["facts"], probe["profile"] or {}
    usable = (profile.get("machine") or {}).get("usable_cpus") or facts["online_cpus"]
    return {
        "architecture": facts["architecture"],
        "model_name": ", ".join(facts["model_names"]) or "unknown",
        "usable_cpus": usable,
        "usable_cpu_count": len(_cpu_ids(usable)),
        "numa_nodes": len(facts["numa_nodes"]) or 1,
        "isa": facts["isa"],
        "memory_total_bytes": facts.get("memory_total_bytes"),
        "planned_dtype": profile.get("dtype", "float32"),
        "stage_cpus": [stage["cpus"] for stage in profile.get("stages", [])],
    }


def _cpu_ids(cpu_list: str) -> list[int]:
    return list(parse_cpu_list(cpu_list))


def resolve(args: argparse.Namespace, probe: dict[str, Any]) -> Settings:
    """Fill machine-dependent defaults: threads = usable CPUs, dtype = the plan's."""
    machine = machine_facts(probe)
    usable = _cpu_ids(machine["usable_cpus"])
    threads = args.threads or len(usable)
    if threads > len(usable):
        raise InputError(
            f"--threads {threads}: only {len(usable)} CPUs are usable here",
            fix=f"pass --threads {len(usable)} or fewer",
        )
    # Fewer threads than CPUs: confine both sides to the same first CPUs, so omni-cpu's
    # auto profile (which honours the affinity mask) plans for exactly those.
    cpus = None
    if threads < len(usable):
        cpus = format_cpu_list(usable[:threads])
    model = _repo_relative(args.model)
    profile, profile_dtype = "auto", machine["planned_dtype"]
    if args.deploy_profile != "auto":
        profile, profile_dtype = _profile_dtype(Path(args.deploy_profile))
        if args.dtype not in (None, profile_dtype):
            raise InputError(
                f"--dtype {args.dtype} differs from {profile}'s dtype {profile_dtype}",
                fix="drop --dtype, or give a profile with that dtype",
            )
    return Settings(
        model=model,
        frames=args.frames,
        text=args.text,
        speaker=args.speaker,
        threads=threads,
        dtype=args.dtype or profile_dtype,
        runs=args.runs,
        planned_dtype=profile_dtype,
        profile=profile,
        cpus=cpus,
        need_checkpoint=checkpoint_missing(model),
        weights=args.weights,
        machine=machine,
    )


def _profile_dtype(path: Path) -> tuple[str, str]:
    """A profile file as the commands name it, and the dtype its stages run in."""
    from omni_cpu.profile import load_profile

    return str(_repo_relative(path)), load_profile(path).dtype


def _repo_relative(path: Path) -> Path:
    """Paths in recorded commands read from the repo root (where they are run).

    Made absolute without following links: a checkout whose checkpoints/ links elsewhere
    still names `checkpoints/0.6b`, as the user typed it.
    """
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(REPO)
    except ValueError:
        return absolute


def checkpoint_missing(model: Path) -> bool:
    """True when the comparison must first make the random 0.6B checkpoint."""
    return not (REPO / model).joinpath("config.json").exists()


def commands(settings: Settings) -> dict[str, list[str]]:
    """Every command the comparison runs, in order, as they run from the repo root."""
    wrap = ["taskset", "-c", settings.cpus] if settings.cpus else []
    found: dict[str, list[str]] = {}
    if settings.need_checkpoint:
        found["make_checkpoint"] = [
            settings.omni_cpu,
            "make-checkpoint",
            "--size",
            "0.6b",
            "--out",
            str(settings.model),
        ]
    profile = settings.profile
    if settings.dtype != settings.planned_dtype:
        profile = "out/compare-qwen-tts-profile.yaml"
        found["profile"] = [
            *wrap,
            settings.omni_cpu,
            "probe",
            "--model",
            str(settings.model),
            "--dtype",
            settings.dtype,
            "--output",
            profile,
        ]
    found["reference"] = [
        *wrap,
        str(REFERENCE_PYTHON),
        str(REFERENCE_SCRIPT),
        "--model",
        str(settings.model),
        "--text",
        settings.text,
        "--speaker",
        settings.speaker,
        "--frames",
        str(settings.frames),
        "--threads",
        str(settings.threads),
        "--dtype",
        settings.dtype,
        "--runs",
        str(settings.runs),
    ]
    found["omni_cpu"] = [
        *wrap,
        settings.omni_cpu,
        "run",
        "--model",
        str(settings.model),
        "--deploy-profile",
        profile,
        "--text",
        settings.text,
        "--speaker",
        settings.speaker,
        "--max-frames",
        str(settings.frames),
        "--stream",
        "--json",
        "--out",
        "out/compare-qwen-tts-omni-cpu.wav",
        *(["--weights", settings.weights] if settings.weights != "model" else []),
    ]
    return found


# `omni-cpu run --json` names (omni_cpu/launch/results.py RunResult.to_dict) -> ours.
OMNI_CPU_KEYS = {
    "wall_s": "wall_seconds",
    "audio_s": "audio_seconds",
    "ttfa_s": "ttfa_seconds",
    "load_s": "startup_seconds",
}
FRAME_RATE_HZ = 12.5  # one codec frame is 80 ms of audio


def normalize_omni_cpu(result: dict[str, Any]) -> dict[str, Any]:
    """`omni-cpu run --json` in this script's metric names, with frames from the audio."""
    normalized = dict(result)
    for theirs, ours in OMNI_CPU_KEYS.items():
        if theirs in result and ours not in result:
            normalized[ours] = result[theirs]
    audio_seconds = normalized.get("audio_seconds")
    if "frames" not in normalized and isinstance(audio_seconds, int | float):
        normalized["frames"] = round(audio_seconds * FRAME_RATE_HZ)
    return normalized


class TreeRssSampler:
    """Peak of the summed RSS of a process and all its descendants, sampled with psutil.

    omni-cpu runs a driver plus an engine-core and a worker process per stage, so no
    single process's peak says what the machine must hold; the reference is one
    process. Sampling both sides the same way keeps the row comparable. Pages shared
    between processes (mapped libraries) count once per process: an upper bound.
    """

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeRssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, self.sample())

    def sample(self) -> int:
        """The summed RSS of the tree now (processes that vanish mid-read count 0)."""
        return proctree.tree_rss_bytes(self.pid)


def parse_json_output(stdout: str) -> dict[str, Any] | None:
    """The last top-level JSON object a command printed among other chatter, if any.

    Engines and libraries log on stdout too (before and after the result), and the
    result may be indented over many lines: an object starts at a line's first column.
    """
    decoder = json.JSONDecoder()
    found, position = None, 0
    starts = [0] + [i + 1 for i, c in enumerate(stdout) if c == "\n"]
    for start in starts:
        if start < position or not stdout.startswith("{", start):
            continue
        try:
            value, position = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found = value
    return found


def run_json(
    name: str, command: list[str], *, expect_json: bool = True
) -> tuple[dict[str, Any], float]:
    """Run one command; its JSON result and the process's wall time (load included)."""
    print(f"compare: {name}: {shlex.join(command)}", file=sys.stderr, flush=True)
    # Engines log a lot: keep each command's stderr in a file, quote its tail on failure.
    log = REPO / "out" / f"compare-qwen-tts-{name.replace(' ', '-')}.log"
    log.parent.mkdir(exist_ok=True)
    started = time.perf_counter()
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True
        ) as process,
        TreeRssSampler(process.pid) as rss,
    ):
        stdout, _ = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        lines = log.read_text().strip().splitlines()
        # omni-cpu ends with one `error: ... (fix)` line; anything else, quote its last lines.
        errors = [line for line in lines if line.startswith("error: ")]
        tail = errors[-1].removeprefix("error: ") if errors else " | ".join(lines[-5:])
        raise StageError(
            f"{name} exited {process.returncode}: {tail}",
            fix=f"see {log.relative_to(REPO)}, or rerun its command above",
        )
    if not expect_json:
        return {}, seconds
    result = parse_json_output(stdout)
    if result is None:
        kept = log.with_suffix(".stdout")
        kept.write_text(stdout)
        raise StageError(
            f"{name} printed no JSON result", fix=f"see {kept.relative_to(REPO)} and {log.name}"
        )
    if "peak_rss_bytes" in result:  # the process's own figure, kept beside the sampled one
        result["peak_rss_bytes_reported"] = result["peak_rss_bytes"]
    result["peak_rss_bytes"] = rss.peak_bytes
    return result, seconds


def median_result(results: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """One side's metrics: the median over its processes of every numeric METRICS key.

    A side that does not report its start-up gets process wall − request wall: each
    omni-cpu process serves one request, so the rest is imports and engine start.
    """
    merged = dict(results[-1][0])
    for result, process_seconds in results:
        if "startup_seconds" not in result and isinstance(result.get("wall_seconds"), float):
            result["startup_seconds"] = process_seconds - result["wall_seconds"]
    for key, _, _ in METRICS:
        values = [r.get(key) for r, _ in results]
        numbers = [v for v in values if isinstance(v, int | float)]
        if numbers:
            merged[key] = statistics.median(numbers)
    return merged


def compare(reference: dict[str, Any], omni_cpu: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric both sides or either side reports, with reference ÷ omni-cpu."""
    rows = []
    for key, label, unit in METRICS:
        left, right = reference.get(key), omni_cpu.get(key)
        if left is None and right is None:
            continue
        ratio = left / right if left is not None and right else None
        rows.append(
            {
                "metric": key,
                "label": label,
                "unit": unit,
                "reference": left,
                "omni_cpu": right,
                "ratio": ratio,
            }
        )
    return rows


def _cell(value: float | int | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "GiB":
        return f"{value / 2**30:.2f} GiB"
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}{' ' + unit if unit else ''}"


def frames_mismatch(rows: list[dict[str, Any]]) -> str | None:
    """A warning when the two sides emitted different frame counts, else None."""
    for row in rows:
        if row["metric"] == "frames" and row["reference"] != row["omni_cpu"]:
            return (
                f"The sides emitted different frame counts (qwen-tts {row['reference']}, "
                f"omni-cpu {row['omni_cpu']}): compare RTF (per audio second), not wall times."
            )
    return None


def results_section(result: dict[str, Any]) -> str:
    """The dated Markdown section appended to RESULTS.md for one comparison."""
    machine, settings = result["machine"], result["settings"]
    load = result.get("load_average")
    lines = [
        f"## {result['date']}: qwen-tts {result['reference'].get('version', '?')} "
        f"reference vs omni-cpu, {settings['frames']} frames",
        "",
        f"- Machine (`omni-cpu probe --json`): {machine['architecture']}, "
        f"{machine['model_name']}, {machine['usable_cpu_count']} usable CPUs "
        f"({machine['usable_cpus']}), {machine['numa_nodes']} NUMA node(s), "
        f"ISA {' '.join(machine['isa']) or 'baseline'}.",
        f"- Both sides: {settings['threads']} threads, {settings['dtype']} "
        f"(omni-cpu's plan: {machine['planned_dtype']}; its profile: "
        f"{settings.get('deploy_profile', 'auto')}), text {settings['text']!r}, speaker "
        f"{settings['speaker']}, median of {settings['runs']} run(s).",
    ]
    if settings.get("weights", "model") != "model":
        lines.append(f"- omni-cpu talker weights: {settings['weights']} (`--weights`).")
    if load is not None:
        lines.append(f"- Load average before the run: {' '.join(f'{x:.2f}' for x in load)}.")
    mismatch = frames_mismatch(result["rows"])
    if mismatch:
        lines.append(f"- **{mismatch}**")
    lines += ["", "Commands (from the repo root):", "", "```sh"]
    lines += [shlex.join(command) for command in result["commands"].values()]
    lines += [
        "```",
        "",
        "| metric | qwen-tts | omni-cpu | qwen-tts ÷ omni-cpu |",
        "|---|---|---|---|",
    ]
    for row in result["rows"]:
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        lines.append(
            f"| {row['label']} | {_cell(row['reference'], row['unit'])} | "
            f"{_cell(row['omni_cpu'], row['unit'])} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def append_results(section: str, path: Path) -> None:
    """Append a section, creating the file with its heading the first time."""
    if not path.exists():
        path.write_text(
            "# Benchmark results\n\nEach section is one run of a script in benchmarks/ "
            "(see benchmarks/README.md), newest last.\n"
        )
    with path.open("a") as file:
        file.write("\n" + section)


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"qwen-tts vs omni-cpu, {result['settings']['frames']} frames")
    for column in ("metric", "qwen-tts", "omni-cpu", "qwen-tts ÷ omni-cpu"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in result["rows"]:
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        table.add_row(
            row["label"],
            _cell(row["reference"], row["unit"]),
            _cell(row["omni_cpu"], row["unit"]),
            ratio,
        )
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; a user's mistake or a failed side is one line on stderr."""
    try:
        return compare_main(parse_args(argv))
    except OmniCpuError as error:
        print(f"error: {error.one_line()}", file=sys.stderr)
        return error.exit_code


def compare_main(args: argparse.Namespace) -> int:
    """Resolve settings, print the commands (--dry-run) or run both sides and report."""
    omni_cpu = Settings.omni_cpu
    probe = probe_command(omni_cpu, _repo_relative(args.model))
    settings = resolve(args, run_probe(probe))
    planned = commands(settings)
    if args.dry_run:
        for command in (probe, *planned.values()):
            print(shlex.join(command))
        return 0
    if not (REPO / REFERENCE_PYTHON).exists():
        raise RuntimeMissingError(
            f"no reference venv at {REFERENCE_PYTHON}",
            fix="make it with benchmarks/setup-qwen-tts-venv.sh",
        )
    load_average = os.getloadavg()
    if load_average[0] > QUIET_LOAD:
        print(
            f"compare: warning: load average {load_average[0]:.2f} > {QUIET_LOAD}: "
            "other work shares these CPUs, timings will be off",
            file=sys.stderr,
        )
    (REPO / "out").mkdir(exist_ok=True)  # logs, the profile and omni-cpu's WAV go there
    for name in ("make_checkpoint", "profile"):
        if name in planned:
            run_json(name, planned[name], expect_json=False)
    reference = median_result([run_json("reference", planned["reference"])])
    omni_runs = [run_json(f"omni-cpu {i + 1}", planned["omni_cpu"]) for i in range(args.runs)]
    omni = median_result([(normalize_omni_cpu(r), seconds) for r, seconds in omni_runs])
    result = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": list(load_average),
        "machine": settings.machine,
        "settings": {
            "model": str(settings.model),
            "frames": settings.frames,
            "text": settings.text,
            "speaker": settings.speaker,
            "threads": settings.threads,
            "dtype": settings.dtype,
            "runs": settings.runs,
            "cpus": settings.cpus,
            "deploy_profile": settings.profile,
            "weights": settings.weights,
        },
        "commands": {"probe": probe, **planned},
        "reference": reference,
        "omni_cpu": omni,
        "rows": compare(reference, omni),
    }
    mismatch = frames_mismatch(result["rows"])
    if mismatch:
        print(f"compare: warning: {mismatch}", file=sys.stderr)
    if not args.no_record:
        append_results(results_section(result), REPO / RESULTS_FILE)
    if args.json:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print_table(result)
        if not args.no_record:
            print(f"appended to {RESULTS_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
