"""`omni-cpu run`: synthesize speech through the two-stage Qwen3-TTS pipeline on CPU."""

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
from omni_cpu.cli.voice import Voice, voice_options

_HELP = """\
Synthesize speech with Qwen3-TTS on vLLM's CPU backend, one stage per core set.

The deploy profile decides each stage's cores, memory node, KV cache bytes and
batch limits: `auto` plans this machine now; a FILE is a checked-in profile
(`omni-cpu probe --output FILE`), checked against this machine first.
`--dry-run` prints each stage's environment and engine arguments and exits
without starting anything.

The task type follows the model (config.json `tts_model_type`):

  CustomVoice  --speaker ryan [--instruct 'Cheerfully.' on the 1.7B]
  VoiceDesign  --instruct 'A warm, low female voice, speaking slowly'
  Base         --ref-audio voice.wav --ref-text 'what the clip says'
               (or --x-vector-only: the timbre from the speaker embedding)

Reference audio may have any sample rate and channel count (read with soundfile,
mixed to mono, resampled to 24 kHz); 1-30 s, not silent.

Examples:

  omni-cpu run --model checkpoints/0.6b --text "Hello there." --speaker ryan \\
      --max-frames 124 --out hello.wav --stream

  omni-cpu run --model DIR --deploy-profile deploy.yaml --text Hi --out hi.wav

  omni-cpu run --model checkpoints/0.6b --text Hi --dry-run   # the plan only

  omni-cpu run --model checkpoints/0.6b --text Hi --max-frames 25 --json
"""


def register(app: typer.Typer) -> None:
    """Add `run` to the app."""
    app.command("run", help=_HELP)(run_command)


def _out_paths(out: Path, count: int) -> list[Path]:
    """One WAV per utterance: OUT itself for one, OUT-001.wav, OUT-002.wav... for several."""
    if count == 1:
        return [out]
    return [
        out.with_name(f"{out.stem}-{index:03d}{out.suffix or '.wav'}")
        for index in range(1, count + 1)
    ]


# `run_command`'s options (typer's Annotated style): the signature is one line each.
Model = Annotated[str, typer.Option("--model", help="Checkpoint directory or Hugging Face id.")]
DeployProfile = Annotated[
    str, typer.Option("--deploy-profile", help="`auto` (plan this machine) or a profile YAML file.")
]
Text = Annotated[str | None, typer.Option("--text", help="What to say.")]
TextFile = Annotated[
    Path | None,
    typer.Option("--text-file", help="A file with one utterance per line (one WAV each)."),
]
Language = Annotated[str, typer.Option("--language", help="auto, english, chinese, ...")]
Out = Annotated[Path, typer.Option("--out", help="WAV file to write (24 kHz mono).")]
OutSpecial = Annotated[
    bool,
    typer.Option(
        "--out-special", help="Let --out be a symlink (written through), a device or a FIFO."
    ),
]
Stream = Annotated[
    bool,
    typer.Option("--stream", help="Write audio as chunks arrive and report time to first audio."),
]
MaxFrames = Annotated[
    int | None, typer.Option("--max-frames", help="Stop after this many codec frames (80 ms each).")
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print per-stage env and engine args, start nothing.")
]
Force = Annotated[
    bool, typer.Option("--force", help="Start a profile whose memory does not fit this machine.")
]
Weights = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed", help="Seed the talker's and code predictor's sampling (same seed, same WAV)."
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(
        "--temperature", help="Sampling temperature, talker and code predictor (profile's)."
    ),
]
TopK = Annotated[int | None, typer.Option("--top-k", help="Top-k, -1 for none (profile's).")]
TopP = Annotated[float | None, typer.Option("--top-p", help="Top-p in (0, 1] (profile's).")]
RepetitionPenalty = Annotated[
    float | None,
    typer.Option(
        "--repetition-penalty", help="The talker's repetition penalty, 1 off (profile's)."
    ),
]
Greedy = Annotated[
    bool, typer.Option("--greedy", help="Take the most likely code everywhere (temperature 0).")
]
Verbose = Annotated[bool, typer.Option("--verbose", help=VERBOSE_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="Print timings (or the dry run) as JSON.")]


@voice_options
def run_command(
    model: Model,
    deploy_profile: DeployProfile = "auto",
    text: Text = None,
    text_file: TextFile = None,
    voice: Voice = Voice(),
    language: Language = "auto",
    out: Out = Path("out.wav"),
    out_special: OutSpecial = False,
    stream: Stream = False,
    max_frames: MaxFrames = None,
    dry_run: DryRun = False,
    force: Force = False,
    weights: Weights = "model",
    seed: Seed = None,
    temperature: Temperature = None,
    top_k: TopK = None,
    top_p: TopP = None,
    repetition_penalty: RepetitionPenalty = None,
    greedy: Greedy = False,
    verbose: Verbose = False,
    as_json: AsJson = False,
) -> None:
    from omni_cpu.launch.plan import make_launch_plan
    from omni_cpu.profile.sampling import Sampling
    from omni_cpu.speech.request import read_model_info, read_texts
    from omni_cpu.speech.wav import check_output_path

    check_model(model)
    sampling = Sampling(temperature, top_k, top_p, repetition_penalty, greedy, seed)
    info = read_model_info(model)
    plan = make_launch_plan(model, deploy_profile, weights=weights, force=force, sampling=sampling)
    if not dry_run and state.own_process:
        from omni_cpu.launch.relaunch import relaunch_if_needed

        # Before anything is read (a --text-file may be a pipe) or printed.
        relaunch_if_needed(plan)
    texts = read_texts(text, text_file)
    if not dry_run:
        for path in _out_paths(out, len(texts)):
            check_output_path(path, allow_special=out_special)
    requests = voice.requests(info, texts, language, max_frames)

    if dry_run:
        _print_dry_run(plan, _out_paths(out, len(requests)), as_json)
        return
    for warning in plan.problems:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)

    from omni_cpu.cli.progress import LiveProgress
    from omni_cpu.launch.pipeline import run_pipeline

    with LiveProgress(err_console, enabled=not as_json) as shown:
        result = run_pipeline(
            plan,
            requests,
            _out_paths(out, len(requests)),
            stream=stream,
            allow_special=out_special,
            progress=shown.message,
            on_audio=shown.audio,
            verbose=verbose,
        )
    if as_json:
        print_json(result.to_dict())
        return
    _print_result(result, stream)


def _print_result(result, stream: bool) -> None:
    """What was written, then one line of timings (the binding too, with --debug)."""
    for utterance in result.utterances:
        console.print(f"wrote {utterance.path} ({utterance.audio_s:.2f} s of audio)")
    ttfa = f"{result.ttfa_s:.2f} s" if result.ttfa_s is not None else "n/a"
    rtf = f"{result.rtf:.2f}" if result.rtf is not None else "n/a"
    console.print(
        f"TTFA {ttfa}{'' if stream else ' (sync: audio arrives at the end)'} · "
        f"audio {result.audio_s:.2f} s · wall {result.wall_s:.2f} s · RTF {rtf} "
        f"· start-up {sum(result.startup.values()):.1f} s"
    )
    if state.debug:
        console.print(f"observed OpenMP binding: {result.binding}")


def _print_dry_run(plan, outputs: list[Path], as_json: bool) -> None:
    """The launch plan and the files it would write: as JSON, or as a table."""
    description = plan.describe()
    description["outputs"] = [str(path) for path in outputs]
    if as_json:
        print_json(description)
    else:
        _print_plan(description)


def _print_plan(description: dict) -> None:
    console.print(
        f"model {description['model']} · profile {description['deploy_profile']} · "
        f"replica {description['replica']}"
    )
    for key, value in description["driver_env"].items():
        console.print(f"  driver env {key}={value}")
    for stage in description["stages"]:
        console.print(f"[bold]stage {stage['stage_id']} ({stage['name']})[/]")
        for key, value in stage["env"].items():
            console.print(f"  env {key}={value}", highlight=False)
        for key, value in stage["engine_args"].items():
            if key != "stage_id":
                console.print(f"  arg {key}: {value}", highlight=False)
    for warning in description["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    console.print("outputs: " + ", ".join(description["outputs"]))
