"""What `run` shows while it works: plain lines once each in a pipe, a live line on a terminal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from omni_cpu.cli.progress import LiveProgress
from omni_cpu.launch.results import Utterance


def _chunks(shown: LiveProgress) -> None:
    utterance = Utterance(0, Path("out.wav"))
    shown.message("loading the talker and code2wav engines")
    shown.message("engines up in 12.0 s; synthesizing 1 utterance(s)")
    for seconds in (0.5, 1.0, 1.5):
        utterance.samples += 1920 * 4
        utterance.chunks += 1
        if utterance.first_audio_s is None:
            utterance.first_audio_s = seconds
        shown.audio([utterance], seconds)


def test_in_a_pipe_each_fact_is_one_plain_line() -> None:
    out = io.StringIO()
    with LiveProgress(Console(file=out, force_terminal=False)) as shown:
        _chunks(shown)
    assert out.getvalue().splitlines() == [
        "… loading the talker and code2wav engines",
        "… engines up in 12.0 s; synthesizing 1 utterance(s)",
        "… first audio after 0.50 s",
    ]


def test_on_a_terminal_the_live_line_goes_and_the_facts_stay() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with LiveProgress(console) as shown:
        _chunks(shown)
    text = out.getvalue()
    assert "engines up in 12.0 s" in text and "first audio after 0.50 s" in text
    assert "audio arriving: 3 chunk(s)" in text  # drawn while it ran


def test_disabled_progress_prints_nothing() -> None:
    out = io.StringIO()
    with LiveProgress(Console(file=out, force_terminal=True), enabled=False) as shown:
        _chunks(shown)
    assert out.getvalue() == ""
