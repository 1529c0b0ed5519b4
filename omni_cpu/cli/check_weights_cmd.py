"""`omni-cpu check-weights`: how far each quantized weight format moves this checkpoint's audio."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from omni_cpu import envs
from omni_cpu.cli.common import VERBOSE_HELP, check_model, console, err_console, print_json
from omni_cpu.cli.voice import BENCH_TEXT, BENCH_VOICE, Voice, voice_options
from omni_cpu.errors import InputError, RuntimeMissingError

QUANTIZED = tuple(choice for choice in envs.WEIGHTS.choices if choice != "model")
DEFAULT_FRAMES = 100

_HELP = f"""\
Before turning a quantized weight format on, see what it changes on your own
checkpoint: the same texts run through the talker's own dtype (the reference:
bfloat16 where the CPU has native bf16, else float32, as `probe` plans) and
through each format, in this process, on the kernels `run --weights` uses.

Both runs are greedy (argmax, no sampling), so they depend on the weights
alone. Each format is teacher-forced on the reference: every step it is fed
the reference's previous frame, so frame t of each figure compares the same
position rather than two utterances that parted at their first different code.

  logit KL      KL(reference || format) of the talker's layer-0
                distribution, nats per frame
  top-1         share of frames where the talker's argmax is the
                reference's code
  codes equal   share of the 15 residual codes the code predictor picks
                for the reference's layer-0 code equal to the reference's
  frames equal  share of frames whose 15 residual codes are all equal
  log-mel dB    mean |log-mel difference| (80 bands, dB) per frame between
                the reference's audio and that of the frames the format
                chose (each decoded by the same float32 codec decoder)
  speaker cos   Base: cosine of the speaker encoder's embeddings of the
                two outputs (the lowest over the texts)

With random weights (a make-checkpoint checkpoint) the figures only say how far
a format perturbs a random network; the command says so. Default texts: one
sentence; formats: every quantized one ({", ".join(QUANTIZED)}); `model` checks
the reference against itself (KL 0, agreement 1).

Examples:

  omni-cpu check-weights --model DIR
  omni-cpu check-weights --model DIR --weights int8 --text-file lines.txt
  omni-cpu check-weights --model DIR --json --plot divergence.png
"""


def register(app: typer.Typer) -> None:
    """Add `check-weights` to the app."""
    app.command("check-weights", help=_HELP)(check_weights_command)


def parse_formats(value: str | None) -> list[str]:
    """The formats to check, in order, each once; every quantized one when not given."""
    if value is None:
        return list(QUANTIZED)
    chosen: list[str] = []
    for item in value.split(","):  # an empty item is refused like any other unknown one
        weights = envs.WEIGHTS.read(item, "--weights")
        if weights not in chosen:
            chosen.append(weights)
    return chosen


def _talker_dtype(dtype: str | None) -> str:
    """The dtype `run` would give the talker here: bfloat16 where the CPU has native bf16."""
    from omni_cpu.profile.model import DTYPES

    if dtype is None:
        from omni_cpu.hardware.probe import read_facts
        from omni_cpu.plan import choose_dtype

        return choose_dtype(read_facts())
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    return dtype


# `check_weights_command`'s options (typer's Annotated style): the signature is one line each.
Model = Annotated[Path, typer.Option("--model", help="Checkpoint directory (local).")]
Weights = Annotated[
    str | None,
    typer.Option(
        "--weights", help=f"Comma-separated formats to check (default: {','.join(QUANTIZED)})."
    ),
]
Text = Annotated[str | None, typer.Option("--text", help="What to say (default: one sentence).")]
TextFile = Annotated[
    Path | None, typer.Option("--text-file", help="A file with one utterance per line.")
]
Language = Annotated[str, typer.Option("--language", help="auto, english, chinese, ...")]
Frames = Annotated[
    int, typer.Option("--frames", min=1, help="At most this many codec frames per text (80 ms).")
]
Dtype = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="The talker's dtype: bfloat16 or float32 (default: what `probe` plans here).",
    ),
]
Threads = Annotated[
    int,
    typer.Option(
        "--threads", min=1, help="Threads for the models (1: a talker stage's own count)."
    ),
]
Verbose = Annotated[bool, typer.Option("--verbose", help=VERBOSE_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="Print every figure as JSON.")]
Plot = Annotated[
    Path | None,
    typer.Option("--plot", help="Write the per-frame KL and log-mel distance as a PNG."),
]


@voice_options
def check_weights_command(
    model: Model,
    weights: Weights = None,
    text: Text = None,
    text_file: TextFile = None,
    voice: Voice = Voice(),
    language: Language = "auto",
    frames: Frames = DEFAULT_FRAMES,
    dtype: Dtype = None,
    threads: Threads = 1,
    verbose: Verbose = False,
    as_json: AsJson = False,
    plot: Plot = None,
) -> None:
    from omni_cpu.bench.report import require_matplotlib
    from omni_cpu.bench.sweep import check_query_type
    from omni_cpu.launch import logs
    from omni_cpu.output import check_output_path
    from omni_cpu.speech.request import read_model_info, read_texts

    check_model(str(model))
    formats = parse_formats(weights)
    dtype = _talker_dtype(dtype)
    info = read_model_info(str(model))
    if info.path is None:
        raise InputError(f"--model {model}: not a local checkpoint", "pass a checkpoint directory")
    texts = [BENCH_TEXT] if text is None and text_file is None else read_texts(text, text_file)
    task = check_query_type(voice.query_type or info.task_type or "CustomVoice")
    if task == "VoiceDesign" and voice.instruct is None:
        voice = dataclasses.replace(voice, instruct=BENCH_VOICE)
    requests = voice.requests(info, texts, language, frames)
    if plot is not None:
        require_matplotlib()
        check_output_path(plot, option="--plot")

    logs.apply_to_this_process(logs.verbose_requested(verbose))
    try:
        from omni_cpu.platform import inprocess
        from omni_cpu.quality.check_weights import RANDOM_NOTE, check_weights
    except ImportError as error:
        raise RuntimeMissingError.on_import(error) from None
    for chosen in formats:
        if not inprocess.format_available(chosen):
            raise InputError(
                f"--weights {chosen}: this CPU and torch build have no kernel for it",
                "leave it out, or check on a CPU that runs it",
            )

    def progress(message: str) -> None:
        if not as_json:
            err_console.print(f"[dim]…[/] {message}", highlight=False)

    result = check_weights(info.path, requests, formats, frames, progress, threads, dtype)
    if plot is not None:
        from omni_cpu.quality.plot import plot_divergence

        plot_divergence(result, plot)
        if not as_json:
            err_console.print(f"wrote {plot}", highlight=False)
    data = result.to_dict()
    if as_json:
        print_json(data)
        return
    console.print(_table(data))
    if result.random_weights:
        err_console.print(f"[yellow]note:[/] {RANDOM_NOTE}", highlight=False)


def _figure(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if digits < 0:
        return f"{value:.{-digits}g}"
    return str(value) if digits == 0 else f"{value:.{digits}f}"


ROWS: tuple[tuple[str, str, int], ...] = (
    # (label, summary key, digits after the point; -n: n significant digits)
    ("frames", "frames", 0),
    ("logit KL mean (nats)", "logit_kl_mean", -3),
    ("logit KL p95", "logit_kl_p95", -3),
    ("logit KL max", "logit_kl_max", -3),
    ("top-1 agreement", "top1_agreement", 3),
    ("codes equal", "codes_equal", 3),
    ("frames all equal", "frames_all_equal", 3),
    ("log-mel distance (dB)", "log_mel_db_mean", 2),
    ("speaker cosine (min)", "speaker_cosine", 3),
)


def _table(data: dict[str, Any]) -> Table:
    """One column per format, one row per figure (any number of formats fits)."""
    reference = data["reference"]["dtype"]
    table = Table(
        title=f"{data['model']}: each format against {reference}, greedy, teacher-forced",
        title_justify="left",
    )
    table.add_column("figure", style="bold")
    results = data["formats"]
    for weights in results:
        table.add_column(weights, justify="right")
    for label, key, digits in ROWS:
        table.add_row(label, *(_figure(result[key], digits) for result in results.values()))
    table.add_row(
        "kernels",
        *(
            ", ".join(f"{n} {kernel}" for kernel, n in result["kernels"].items()) or "stock"
            for result in results.values()
        ),
    )
    return table
