"""The `omni-cpu` command line: a thin layer over the library.

Each command lives in its own module with a `register(app)` function; this
module only assembles them and turns user mistakes into one-line errors.
"""

from __future__ import annotations

import os
import sys

import typer

from omni_cpu import __version__
from omni_cpu.cli import (
    bench_cmd,
    check_weights_cmd,
    checkpoint_cmd,
    doctor_cmd,
    export_cmd,
    probe_cmd,
    profile_cmd,
    run_cmd,
    serve_cmd,
    tune_cmd,
)
from omni_cpu.cli.common import err_console, state, stdout_closed
from omni_cpu.cli.helptext import plain_flags, reflow_app
from omni_cpu.errors import OmniCpuError

app = typer.Typer(
    name="omni-cpu",
    help=(
        "Plan, check and run vLLM-Omni speech pipelines (Qwen3-TTS) on CPU servers.\n\n"
        "Typical use:\n\n"
        "  omni-cpu probe --output deploy.yaml   # read this machine, write a profile\n"
        "  omni-cpu validate deploy.yaml         # check a profile on this machine\n"
        "  omni-cpu run --model DIR --deploy-profile deploy.yaml --text Hi --out hi.wav\n\n"
        "Each command's --help has its options and examples."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"omni-cpu {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    state.debug = debug


for _module in (
    probe_cmd,
    profile_cmd,
    checkpoint_cmd,
    run_cmd,
    doctor_cmd,
    export_cmd,
    serve_cmd,
    bench_cmd,
    tune_cmd,
    check_weights_cmd,
):
    _module.register(app)
reflow_app(app)  # every command's help: paragraphs rich wraps once, examples kept
plain_flags()  # --json, --force, --help: no `<bool>` as if they took a value


def _exit(code: int) -> None:
    """Exit with `code`; at once where engines ran (their stages are stopped and swept).

    Once vLLM and torch are loaded, interpreter teardown spends 2-3 s in native
    destructors after the last output is written; nothing is left for it to do.
    """
    pipeline = sys.modules.get("omni_cpu.launch.pipeline")
    if pipeline is not None and pipeline.ENGINES_STARTED.is_set():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main() -> None:
    """Console-script entry point: one line per user error, exit codes that mean something."""
    state.own_process = True
    try:
        _main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BrokenPipeError:
        code = 0  # written while the reader had gone: what was asked is done
    try:
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's teardown
    except BrokenPipeError:
        stdout_closed()
    _exit(code)


INTERRUPTED = 130  # exit code after Ctrl-C / SIGINT, as shells report it


def _main() -> None:
    try:
        # Without standalone mode click returns typer.Exit's code instead of exiting.
        code = app(standalone_mode=False)
    except OmniCpuError as error:
        if state.debug:
            raise
        err_console.print(f"[bold red]error:[/] {error.one_line()}", highlight=False)
        sys.exit(error.exit_code)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as usage_error:
        # Usage errors from typer's (vendored) click show themselves and carry their code.
        if hasattr(usage_error, "show") and isinstance(
            getattr(usage_error, "exit_code", None), int
        ):
            usage_error.show()
            sys.exit(usage_error.exit_code)
        raise
    if code == INTERRUPTED:
        # typer catches a Ctrl-C inside a command itself and returns 130 without a word.
        err_console.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)
