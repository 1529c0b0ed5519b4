"""`omni-cpu bench`: streaming latency and throughput per concurrency level, on CPU."""

from __future__ import annotations

from pathlib import Path

import typer

from omni_cpu.cli.common import VERBOSE_HELP, WEIGHTS_HELP, console, err_console, print_json

_HELP = """\
Measure the pipeline the way its users judge it: time to first audio (TTFA),
real-time factor (RTF) and total throughput per concurrency level, with the
talker's time per frame, each stage's peak memory and the machine's memory
bandwidth (a STREAM-like triad taken before the engines start).

The engines start once; each level then submits its requests as concurrent
streams. Every request generates exactly --frames codec frames (80 ms each),
since random weights rarely stop on their own.
"""

BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and the CPU keeps up with speech."
BENCH_VOICE = "A calm, clear male voice at an even pace."


def register(app: typer.Typer) -> None:
    """Add `bench` to the app."""
    app.command("bench", help=_HELP)(bench_command)


def bench_command(
    model: str = typer.Option(..., "--model", help="Checkpoint directory or Hugging Face id."),
    query_type: str | None = typer.Option(
        None,
        "--query-type",
        help="CustomVoice, VoiceDesign or Base (default: what the model is).",
    ),
    deploy_profile: str = typer.Option(
        "auto", "--deploy-profile", help="`auto` (plan this machine) or a profile YAML file."
    ),
    concurrency: str = typer.Option(
        "1,2,4,8", "--concurrency", help="Comma-separated concurrent stream counts."
    ),
    requests: int | None = typer.Option(
        None, "--requests", min=1, help="Requests per level (default: the level's concurrency)."
    ),
    frames: int = typer.Option(
        50, "--frames", min=2, help="Codec frames per request (80 ms of audio each)."
    ),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Unmeasured requests before level 1."),
    speaker: str | None = typer.Option(
        None, "--speaker", help="CustomVoice: default the model's first."
    ),
    instruct: str | None = typer.Option(
        None, "--instruct", help=f"VoiceDesign: the voice in words (default {BENCH_VOICE!r})."
    ),
    ref_audio: Path | None = typer.Option(
        None, "--ref-audio", help="Base: the voice to clone (1-30 s; any rate and channels)."
    ),
    ref_text: str | None = typer.Option(
        None, "--ref-text", help="Base: what the reference audio says."
    ),
    x_vector_only: bool = typer.Option(
        False, "--x-vector-only", help="Base: clone from the speaker embedding only."
    ),
    weights: str = typer.Option("model", "--weights", help=WEIGHTS_HELP),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Write RTF/TTFA vs concurrency PNG."),
) -> None:
    from omni_cpu.bench.report import print_bench, require_matplotlib, write_plot
    from omni_cpu.bench.runner import check_query_type, parse_concurrency, run_bench
    from omni_cpu.launch.plan import make_launch_plan
    from omni_cpu.launch.ref_audio import read_reference_audio
    from omni_cpu.launch.request import build_requests, read_model_info

    levels = parse_concurrency(concurrency)
    if plot is not None:
        require_matplotlib()
    info = read_model_info(model)
    (first,) = build_requests(  # checks everything once, before the engines start
        info,
        [BENCH_TEXT],
        max_frames=frames,
        query_type=None if query_type is None else check_query_type(query_type),
        ref_audio=None if ref_audio is None else read_reference_audio(ref_audio),
        ref_text=ref_text,
        x_vector_only=x_vector_only,
        **_voice(info, query_type, speaker, instruct),
    )
    kind = first.task_type
    plan = make_launch_plan(model, deploy_profile, weights=weights)
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
    )
    data = result.to_dict()
    if plot is not None:
        write_plot(data, plot)
        err_console.print(f"wrote {plot}", highlight=False)
    if as_json:
        print_json(data)
    else:
        print_bench(console, data)


def _voice(
    info: object, query_type: str | None, speaker: str | None, instruct: str | None
) -> dict[str, str | None]:
    """Speaker and instruction for the model's task type, with bench defaults filled in."""
    task = (query_type or getattr(info, "task_type", "") or "CustomVoice").lower()
    speakers = getattr(info, "speakers", ())
    if task == "customvoice":
        return {"speaker": speaker or (speakers[0] if speakers else "ryan"), "instruct": instruct}
    if task == "voicedesign":
        return {"speaker": speaker, "instruct": instruct or BENCH_VOICE}
    return {"speaker": speaker, "instruct": instruct}
