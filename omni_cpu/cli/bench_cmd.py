"""`omni-cpu bench`: streaming latency and throughput per concurrency level, on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from omni_cpu.cli.common import (
    VERBOSE_HELP,
    WEIGHTS_HELP,
    check_model,
    console,
    err_console,
    print_json,
    state,
)
from omni_cpu.cli.voice import BENCH_VOICE, Voice, bench_request, voice_options
from omni_cpu.plan.listening import SAFE_START_LIMIT_S
from omni_cpu.speech.playback import PLAY_BUFFER_MS

_HELP = f"""\
Measure the pipeline the way its users judge it: time to first audio (TTFA),
real-time factor (RTF), what a listener hears (the safe start: the earliest
moment a player can start and never go silent; and the gaps of a player that
starts at first audio + --play-buffer-ms) and total throughput per concurrency
level, with the
talker's time per frame, each stage's peak memory and the machine's memory
bandwidth (a STREAM-like triad taken before the engines start).

The engines start once; each level then submits its requests as concurrent
streams. Every request generates exactly --frames codec frames (80 ms each),
since random weights rarely stop on their own.

Every request says the same sentence in the voice the options give (as for
`run`); left out, a CustomVoice model speaks as ryan and a VoiceDesign model as
{BENCH_VOICE!r}.

--find-capacity raises the number of concurrent streams (1, 2, 4, ... then
between the last two) until the p95 safe start passes --safe-start-limit, and
reports the most streams that stayed under it (capacity.stall_free_streams).

Examples:

  omni-cpu bench --model checkpoints/0.6b --concurrency 1,2,4 --frames 50

  omni-cpu bench --model checkpoints/0.6b --frames 124 --find-capacity --json

  omni-cpu bench --model DIR --weights int4 --concurrency 1 --plot bench.png
"""


def register(app: typer.Typer) -> None:
    """Add `bench` to the app."""
    app.command("bench", help=_HELP)(bench_command)


# `bench_command`'s options (typer's Annotated style): the signature is one line each.
Model = Annotated[str, typer.Option("--model", help="Checkpoint directory or Hugging Face id.")]
DeployProfile = Annotated[
    str, typer.Option("--deploy-profile", help="`auto` (plan this machine) or a profile YAML file.")
]
Concurrency = Annotated[
    str, typer.Option("--concurrency", help="Comma-separated concurrent stream counts.")
]
Requests = Annotated[
    int | None,
    typer.Option(
        "--requests", min=1, help="Requests per level (default: the level's concurrency)."
    ),
]
Frames = Annotated[
    int,
    typer.Option(
        "--frames",
        min=2,
        help="Codec frames per request (80 ms of audio each; 124 is a 10 s sentence).",
    ),
]
Warmup = Annotated[int, typer.Option("--warmup", min=0, help="Unmeasured requests before level 1.")]
Weights = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
Verbose = Annotated[bool, typer.Option("--verbose", help=VERBOSE_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="Print the results as JSON.")]
PlayBufferMs = Annotated[
    int,
    typer.Option(
        "--play-buffer-ms",
        min=0,
        help="The player's buffer past first audio, for stalled_streams and stall_s_p95.",
    ),
]
FindCapacity = Annotated[
    bool,
    typer.Option(
        "--find-capacity",
        help="Raise the streams until safe_start_p95_s passes --safe-start-limit; "
        "report capacity.stall_free_streams (replaces --concurrency).",
    ),
]
SafeStartLimit = Annotated[
    float,
    typer.Option(
        "--safe-start-limit",
        min=0.05,
        help="Seconds: the latest p95 safe start --find-capacity calls stall-free.",
    ),
]
Plot = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Write a PNG: RTF/TTFA against concurrency, and per stream the audio "
        "arrived against the audio played.",
    ),
]


@voice_options
def bench_command(
    model: Model,
    deploy_profile: DeployProfile = "auto",
    concurrency: Concurrency = "1,2,4,8",
    requests: Requests = None,
    frames: Frames = 124,
    warmup: Warmup = 1,
    voice: Voice = Voice(),
    weights: Weights = "model",
    verbose: Verbose = False,
    as_json: AsJson = False,
    play_buffer_ms: PlayBufferMs = PLAY_BUFFER_MS,
    find_capacity: FindCapacity = False,
    safe_start_limit: SafeStartLimit = SAFE_START_LIMIT_S,
    plot: Plot = None,
) -> None:
    from omni_cpu.bench.report import print_bench, require_matplotlib, write_plot
    from omni_cpu.bench.sweep import parse_concurrency, run_bench
    from omni_cpu.launch.plan import make_launch_plan
    from omni_cpu.speech.request import read_model_info

    check_model(model)
    levels = parse_concurrency(concurrency)
    if plot is not None:
        from omni_cpu.output import check_output_path

        require_matplotlib()
        check_output_path(plot, option="--plot")
    # Checks everything once, before the engines start.
    first = bench_request(read_model_info(model), frames, voice)
    kind = first.task_type
    plan = make_launch_plan(model, deploy_profile, weights=weights)
    if state.own_process:
        from omni_cpu.launch.relaunch import relaunch_if_needed

        relaunch_if_needed(plan)  # so the stages can be forked from this process
    for warning in plan.problems:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)

    def make_requests(count: int):
        return [first] * count

    def progress(message: str) -> None:
        err_console.print(f"[dim]…[/] {message}", highlight=False)

    result = run_bench(
        plan,
        make_requests,
        levels,
        requests,
        query_type=kind,
        frames=frames,
        warmup=warmup,
        progress=progress,
        verbose=verbose,
        play_buffer_ms=play_buffer_ms,
        safe_start_limit_s=safe_start_limit if find_capacity else None,
    )
    data = result.to_dict()
    if plot is not None:
        write_plot(data, plot)
        err_console.print(f"wrote {plot}", highlight=False)
    if as_json:
        print_json(data)
    else:
        print_bench(console, data)
