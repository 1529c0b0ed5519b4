"""What every command shares: consoles, the --debug flag, JSON output."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from omni_cpu import weight_formats
from omni_cpu.plan.footprint import DTYPE_BYTES


def stdout_closed() -> None:
    """stdout's reader went away (`omni-cpu probe | head`): write the rest to /dev/null.

    Not an error: the command goes on and exits with its own code, where rich would
    exit 1 and typer turn the EPIPE into a silent exit 1.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    finally:
        os.close(devnull)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        stdout_closed()


console = _Console()
# Errors stay on one line whatever the terminal width (scripts grep them).
err_console = Console(stderr=True, soft_wrap=True)


@dataclass
class _State:
    debug: bool = False
    # True in the `omni-cpu` process itself (main()), not under a test's CliRunner:
    # only then may a command re-execute the process (omni_cpu.launch.relaunch).
    own_process: bool = False


state = _State()


def weights_help() -> str:
    """`--weights`' help: each format with the memory traffic a frame it saves (the cost
    model streams every linear weight once a frame in the format's bytes, so a frame's
    bytes scale as the weight's) and the CPUs it needs (omni_cpu.weight_formats)."""
    reference = DTYPE_BYTES["bfloat16"]
    packed = [
        f"'{f.name}' ({f.bytes_per_weight:g} byte{'' if f.bytes_per_weight == 1 else 's'} a "
        f"weight: {f.traffic_ratio(reference):.2g}x less memory traffic per frame than "
        f"bfloat16; {f.needs()})"
        for f in weight_formats.FORMATS.values()
        if f.quantized
    ]
    return (
        f"Talker weights: '{weight_formats.MODEL.name}' (the checkpoint's dtype), "
        + ", ".join(packed)
        + "; each changes the audio, so listen first."
    )


WEIGHTS_HELP = weights_help()

VERBOSE_HELP = (
    "Show the engines' own logs (vLLM INFO lines, transformers notices, load progress); "
    "OMNI_CPU_VERBOSE=1 does the same for services."
)


def print_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout, nothing else."""
    try:
        json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()


def check_model(model: str) -> None:
    """`--model` checked before anything is planned or started: one line where it is not
    there (omni_cpu.checkpoint.locate; a hub id is looked up once, within seconds)."""
    from omni_cpu.checkpoint.locate import check_model as locate

    locate(model)
