"""Ctrl-C inside any command: one line, `interrupted`, and exit 130."""

from __future__ import annotations

import pytest
import typer

import omni_cpu.cli as cli


def test_an_interrupt_inside_a_command_says_so_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # typer catches the KeyboardInterrupt and returns 130; the line must still be printed.
    app = typer.Typer()

    @app.command()
    def synthesize() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr("sys.argv", ["omni-cpu"])
    with pytest.raises(SystemExit) as done:
        cli._main()
    assert done.value.code == 130
    assert capfd.readouterr().err.strip().splitlines()[-1] == "interrupted"
