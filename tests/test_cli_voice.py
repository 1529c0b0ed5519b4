"""`@voice_options`: one `Voice` from a command line's voice options, for run, bench and tune."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from omni_cpu.cli.voice import Voice, voice_options


def _probe_app(seen: list[tuple[str, Voice, bool]]) -> typer.Typer:
    """A one-command app whose command keeps what it was called with."""
    app = typer.Typer()

    @app.command()
    @voice_options
    def speak(
        model: str = typer.Option(..., "--model"),
        voice: Voice = Voice(),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        seen.append((model, voice, as_json))

    return app


def test_the_voice_options_become_one_voice_and_the_rest_pass_through(tmp_path: Path) -> None:
    seen: list[tuple[str, Voice, bool]] = []
    clip = tmp_path / "voice.wav"
    done = CliRunner().invoke(
        _probe_app(seen),
        ["--model", "m", "--query-type", "base", "--ref-audio", str(clip), "--x-vector-only"],
    )
    assert done.exit_code == 0, done.output
    assert seen == [("m", Voice(query_type="base", ref_audio=clip, x_vector_only=True), False)]


def test_no_voice_options_give_the_empty_voice() -> None:
    seen: list[tuple[str, Voice, bool]] = []
    done = CliRunner().invoke(_probe_app(seen), ["--model", "m", "--json"])
    assert done.exit_code == 0, done.output
    assert seen == [("m", Voice(), True)]


def test_a_voice_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Voice().speaker = "ryan"  # type: ignore[misc]


def test_a_command_without_a_voice_parameter_is_refused() -> None:
    def speak(model: str = typer.Option(..., "--model")) -> None:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="voice"):
        voice_options(speak)


@pytest.mark.parametrize("name", ["run", "bench", "tune", "check-weights"])
def test_every_voice_field_is_an_option_of_each_speaking_command(name: str) -> None:
    from omni_cpu.cli import app

    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    offered = {param.name for param in command.params}
    assert {field.name for field in dataclasses.fields(Voice)} <= offered
    assert "voice" not in offered
