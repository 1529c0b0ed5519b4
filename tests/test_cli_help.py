"""`omni-cpu COMMAND --help` as a terminal 80 columns wide shows it."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WIDTH = 80
COMMANDS = [
    [],
    ["probe"],
    ["validate"],
    ["diff"],
    ["make-checkpoint"],
    ["run"],
    ["doctor"],
    ["export", "k8s"],
    ["serve"],
    ["bench"],
    ["tune"],
    ["check-weights"],
]


def rendered_help(*command: str) -> list[str]:
    """The help screen's lines, without the one-column margin rich pads them with."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)}
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", *command, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [line[1:].rstrip() for line in done.stdout.splitlines()]


def prose_paragraph(lines: list[str], starting: str) -> list[str]:
    first = next(i for i, line in enumerate(lines) if line.startswith(starting))
    end = next(i for i in range(first, len(lines)) if not lines[i])
    return lines[first:end]


def test_a_help_paragraph_is_filled_to_the_width_once() -> None:
    lines = rendered_help("make-checkpoint")
    paragraph = prose_paragraph(lines, "For tests and benchmarks")
    assert len(paragraph) >= 3
    for line, following in itertools.pairwise(paragraph):
        # Greedy filling: a line ends only where the next word would not fit on it.
        next_word = following.split()[0]
        assert len(line) + 1 + len(next_word) > WIDTH - 2, (line, following)
    assert "so `omni-cpu run --model DIR` loads it like a real one." in " ".join(paragraph)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "omni-cpu")
def test_every_example_line_renders_whole_at_80_columns(command: list[str]) -> None:
    from typer.main import get_command

    from omni_cpu.cli import app

    click_command = get_command(app)
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    examples = [line.strip() for line in (click_command.help or "").splitlines() if line[:1] == " "]
    shown = [line.strip() for line in rendered_help(*command)]
    for example in examples:
        assert example in shown, f"{example!r} is wrapped or missing"


def _click_command(command: list[str]):
    from typer.main import get_command

    from omni_cpu.cli import app

    click_command = get_command(app)
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    return click_command


@pytest.mark.parametrize("command", COMMANDS[1:], ids=lambda c: " ".join(c))
def test_every_command_teaches_with_examples_that_parse(command: list[str]) -> None:
    from tests.test_docs import omni_cpu_commands, parse

    help_text = _click_command(command).help or ""
    assert re.search(r"^Examples?:$", help_text, re.MULTILINE), "no Examples: paragraph"
    block = "\n".join(line for line in help_text.splitlines() if line.startswith("  "))
    shown = [args for args in omni_cpu_commands(f"```sh\n{block}\n```\n") if args]
    assert shown, "no omni-cpu example line"
    for args in shown:
        assert args[: len(command)] == command, args
        parse(args)  # the CLI's own parser takes it: the options exist, the values fit


@pytest.mark.parametrize("command", [*COMMANDS[1:], ["profile", "upgrade"]], ids=" ".join)
def test_a_flag_shows_no_type_as_if_it_took_a_value(command: list[str]) -> None:
    lines = rendered_help(*command)
    help_line = next(line for line in lines if "--help" in line)
    assert "<bool>" not in "\n".join(lines)
    assert help_line.split("--help", 1)[1].split()[0] == "Show"  # nothing between
    typed = [line for line in lines if re.search(r" <[a-z]+> ", line)]
    assert typed or command == ["doctor"], "what takes a value still shows its type"
