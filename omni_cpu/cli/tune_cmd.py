"""`omni-cpu tune`: benchmark a bounded grid around the auto profile; write the best."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from omni_cpu.cli.common import WEIGHTS_HELP, check_model, console, err_console, print_json, state
from omni_cpu.cli.voice import Voice, bench_request, voice_options

_HELP = """\
Check the planner against measurements on this machine: start the pipeline once
per grid point (core split between the stages, codec chunk size, max_num_seqs,
dtype where the CPU has native bf16), measure single-stream RTF and 4-stream
throughput with a few frames, print every run with the auto profile's marked,
and say whether auto is within 10 % of the best point on both.

Every point measures the same request, in the voice the options give as for
`bench` (a Base model needs --ref-audio and --ref-text, or --x-vector-only).
Each point is one engine start (one to three minutes on a small box).

Examples:

  omni-cpu tune --model checkpoints/0.6b --dry-run   # list the grid points

  omni-cpu tune --model checkpoints/0.6b --max-points 6 --frames 25 \\
      --output best.yaml

  omni-cpu tune --model DIR --table runs.json --json
"""


def register(app: typer.Typer) -> None:
    """Add `tune` to the app."""
    app.command("tune", help=_HELP)(tune_command)


# `tune_command`'s options (typer's Annotated style): the signature is one line each.
Model = Annotated[str, typer.Option("--model", help="Checkpoint directory or Hugging Face id.")]
MaxPoints = Annotated[int, typer.Option("--max-points", min=1, help="Grid points to run at most.")]
Frames = Annotated[int, typer.Option("--frames", min=2, help="Codec frames per request.")]
Output = Annotated[Path | None, typer.Option("--output", help="Write the best profile here.")]
Table = Annotated[Path | None, typer.Option("--table", help="Write all runs as JSON here.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="List the grid points, run nothing.")]
Weights = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")]


@voice_options
def tune_command(
    model: Model,
    max_points: MaxPoints = 6,
    frames: Frames = 25,
    voice: Voice = Voice(),
    output: Output = None,
    table: Table = None,
    dry_run: DryRun = False,
    weights: Weights = "model",
    as_json: AsJson = False,
) -> None:
    from omni_cpu.bench.tune import auto_point, best_point, grid_points, variant_profile, verdict
    from omni_cpu.output import check_output_path, write_text_output
    from omni_cpu.plan import choose_dtype
    from omni_cpu.plan.resolve import resolve
    from omni_cpu.profile import dump_profile
    from omni_cpu.profile.model import DTYPES
    from omni_cpu.speech.request import read_model_info

    # Checks the outputs, the model and the voice (and reads the reference) before any engine.
    for path, option in ((output, "--output"), (table, "--table")):
        if path is not None:
            check_output_path(path, option=option)
    check_model(model)
    request = bench_request(read_model_info(model), frames, voice)
    # The auto plan already carries the weights in its env; every variant is planned
    # from the same facts and options with one or more choices fixed.
    resolved = resolve("auto", model, weights)
    profile, facts = resolved.profile, resolved.facts
    footprint, options = resolved.footprint, resolved.options
    assert footprint is not None and options is not None  # auto always has both

    def variant(point):
        return variant_profile(facts, footprint, options, point)

    # Where bf16 is native both dtypes are worth a try; elsewhere float32 is the only one.
    dtypes = DTYPES if choose_dtype(facts) == "bfloat16" else ()
    points = grid_points(profile, dtypes, max_points)
    auto = auto_point(profile)
    if not dry_run and state.own_process:
        from omni_cpu.bench.tune import launch_plan_for
        from omni_cpu.launch.relaunch import relaunch_if_needed

        # Every point preloads what the auto plan does (the machine's libraries).
        relaunch_if_needed(launch_plan_for(model, profile, "tune"))
    rows = _measure(model, request, points, auto, variant, dry_run)
    result = {
        "model": model,
        "query_type": request.task_type,
        "frames": frames,
        "weights": weights,
        "dry_run": dry_run,
        "runs": rows,
        "verdict": verdict(rows),
    }
    best = None if dry_run else best_point(rows)
    if best is not None and output is not None:
        chosen = points[[row["point"] for row in rows].index(best["point"])]
        write_text_output(output, dump_profile(variant(chosen)))
        result["best_profile"] = str(output)
    if table is not None:
        write_text_output(table, json.dumps(result, indent=2) + "\n", option="--table")
    if as_json:
        print_json(result)
        return
    _print_runs(result)


def _measure(model: str, request, points, auto, variant, dry_run: bool) -> list[dict[str, Any]]:
    """One row per point: its label and measures, or the one line a failing point gave."""
    from omni_cpu.bench.tune import measure_point
    from omni_cpu.errors import OmniCpuError

    def make_requests(count: int):
        return [request] * count

    rows: list[dict[str, Any]] = []
    for index, point in enumerate(points, 1):
        row: dict[str, Any] = {"point": point.label(), "auto": point == auto, "error": None}
        rows.append(row)
        if dry_run:
            continue
        err_console.print(f"[dim]…[/] point {index}/{len(points)}: {point.label()}")
        try:
            row.update(measure_point(model, variant(point), make_requests))
        except OmniCpuError as error:  # one failing point (e.g. float32) must not end the sweep
            row["error"] = error.one_line()
            err_console.print(f"[yellow]point failed:[/] {row['error']}", highlight=False)
    return rows


# Plain words: what each figure is for a listener, with its unit.
RUN_COLUMNS = (
    "",
    "point",
    "RTF, 1 stream (median; below 1 keeps up)",
    "first audio, 1 stream (median, s)",
    "audio s per wall s, 4 streams",
    "error",
)


def _print_runs(result: dict[str, Any]) -> None:
    from rich.table import Table

    def cell(value: Any) -> str:
        return "–" if value is None else str(value)

    out = Table(
        title=f"omni-cpu tune · {result['model']} · {result['query_type']} · "
        f"{result['frames']} frames"
    )
    for column in RUN_COLUMNS:
        out.add_column(column)
    for row in result["runs"]:
        out.add_row(
            "auto" if row["auto"] else "",
            row["point"],
            cell(row.get("rtf_1")),
            cell(row.get("ttfa_1_s")),
            cell(row.get("throughput_4")),
            cell(row["error"]),
        )
    console.print(out)
    verdict = result["verdict"]
    if result.get("dry_run"):
        console.print("dry run: nothing measured")
    elif verdict.get("auto_within_tolerance") is None:
        console.print("no verdict: the auto point was not measured")
    else:
        console.print(
            f"auto within {verdict['tolerance']:.0%} of the best: "
            f"single-stream RTF {'yes' if verdict['auto_rtf_1_ok'] else 'NO'} "
            f"(best {verdict['best_rtf_1']}), 4-stream throughput "
            f"{'yes' if verdict['auto_throughput_4_ok'] else 'NO'} "
            f"(best {verdict['best_throughput_4']})"
        )
    if "best_profile" in result:
        console.print(f"wrote {result['best_profile']}")
