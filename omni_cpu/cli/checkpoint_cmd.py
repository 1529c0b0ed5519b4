"""`omni-cpu make-checkpoint`: a random-weight Qwen3-TTS checkpoint in the real layout."""

from __future__ import annotations

from pathlib import Path

import typer

from omni_cpu.cli.common import console, err_console, print_json

_HELP = """\
Write a random-weight Qwen3-TTS-12Hz checkpoint in the real layout.

For tests and benchmarks where the Hugging Face Hub is out of reach: the files,
config values, tensor names, shapes and dtypes are exactly those of the published
checkpoint (plus an offline-trained Qwen2-style text tokenizer with the real
special-token ids), so `omni-cpu run --model DIR` loads it like a real one.
Speed does not depend on weight values, so timings on it stand for the real
model; the audio it makes is noise, not speech.

Kinds: custom-voice (9 preset speakers; --speaker), voice-design (a voice
described in words; --instruct; 1.7b only) and base (voice cloning from reference
audio; --ref-audio, with the speaker encoder's weights). Sizes: tiny (about 55 MB,
seconds to load; for tests; every kind), 0.6b (2.5 GB), 1.7b (4.5 GB).

Examples:

  omni-cpu make-checkpoint --kind base --size tiny --out ckpt/tiny-base
  omni-cpu make-checkpoint --kind voice-design --size 1.7b --out ckpt/1.7b-vd
"""


def register(app: typer.Typer) -> None:
    """Add `make-checkpoint` to the app."""
    app.command("make-checkpoint", help=_HELP)(make_checkpoint_command)


def make_checkpoint_command(
    size: str = typer.Option(
        ..., "--size", help="Model size: tiny, 0.6b or 1.7b.", case_sensitive=False
    ),
    kind: str = typer.Option(
        "custom-voice",
        "--kind",
        help="Model kind: custom-voice, voice-design or base.",
        case_sensitive=False,
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Directory to write: empty or new, or already holding this size and kind "
        "(kept as it is).",
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed; the same seed writes the same bytes."),
    force: bool = typer.Option(
        False, "--force", help="Write into a non-empty directory, overwriting checkpoint files."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    # Imported here: numpy and tokenizers are not needed by the other commands.
    from omni_cpu.checkpoint import configs
    from omni_cpu.checkpoint.writer import (
        holds_checkpoint,
        make_checkpoint,
        plan_checkpoint,
        summarize,
    )
    from omni_cpu.errors import ModelError, OutputError
    from omni_cpu.output import check_output_folder, why, write_fix

    size, kind = size.lower(), kind.lower()
    if size not in configs.SIZES:
        raise ModelError(
            f"unknown checkpoint size {size!r}", fix=f"use one of {', '.join(configs.SIZES)}"
        )
    if kind not in configs.KINDS:
        raise ModelError(
            f"unknown checkpoint kind {kind!r}", fix=f"use one of {', '.join(configs.KINDS)}"
        )
    try:
        configs.check_kind(kind, size)
    except ValueError as error:
        raise ModelError(str(error), fix="pick a size Qwen publishes for it, or tiny") from None
    plan = plan_checkpoint(size, kind)
    check_output_folder(out)
    if not force and holds_checkpoint(out, plan):
        # Asked for what is already there (make demo wrote it): keep it, say so, exit 0.
        summary = {**summarize(plan, out), "kept": True}
        if as_json:
            print_json(summary)
        else:
            err_console.print(
                f"{out} already holds a {size} {kind} checkpoint: kept it as it is "
                "(--force writes it again)",
                highlight=False,
            )
        return
    try:
        if as_json or size == "tiny":
            directory = make_checkpoint(size, out, seed, force=force, kind=kind)
        else:
            directory = _with_progress(plan.tensor_bytes, size, kind, out, seed, force)
    except OSError as error:  # a full disk part-way: each file is replaced only when whole
        raise OutputError(f"cannot write --out {out}: {why(error)}", write_fix(error)) from None
    summary = {**summarize(plan, directory), "kept": False}
    if as_json:
        print_json(summary)
        return
    _print_summary(summary)


def _with_progress(
    total_bytes: int, size: str, kind: str, out: Path, seed: int, force: bool
) -> Path:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from omni_cpu.checkpoint.writer import make_checkpoint

    columns = (
        TextColumn("[bold]writing {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task(f"{size} {kind} checkpoint", total=total_bytes)
        return make_checkpoint(
            size, out, seed, force=force, kind=kind, on_bytes=lambda n: progress.advance(task, n)
        )


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    table = Table(
        title=f"{summary['size']} {summary['kind']} checkpoint in {summary['out']}",
        title_justify="left",
    )
    table.add_column("file")
    table.add_column("bytes", justify="right")
    for entry in summary["files"]:
        table.add_row(entry["path"], f"{entry['bytes']:,}")
    console.print(table)
    console.print(
        f"{summary['params']:,} parameters, {summary['bytes'] / 1e9:.2f} GB in "
        f"{len(summary['files'])} files"
    )
