"""What `run` and `bench` show while they work: a live display on a terminal, plain lines otherwise.

On a terminal, one spinner line with the elapsed time says what is happening (the
engines loading, then audio arriving: chunks, first audio, audio so far, RTF) and
disappears when done; the lines worth keeping (engines up, first audio) stay. In a
pipe or a log file the same facts come as a few plain lines, once each.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class LiveProgress:
    """A `progress(message)` callback and an `on_audio(utterances, seconds)` hook in one."""

    def __init__(self, console: Console, *, enabled: bool = True) -> None:
        self._console = console
        self._enabled = enabled
        self._live: Progress | None = None
        self._task: Any = None
        self._first_audio_said = False

    def __enter__(self) -> LiveProgress:
        if self._enabled and self._console.is_terminal:
            self._live = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            self._live.start()
            self._task = self._live.add_task("starting", total=None)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _say(self, message: str) -> None:
        if self._enabled:
            self._console.print(f"[dim]…[/] {message}", highlight=False)

    def message(self, message: str) -> None:
        """A step begins (the live line shows it) or ends (a kept line says so)."""
        if self._live is not None:
            if message.startswith("engines up"):
                self._live.console.print(f"[dim]…[/] {message}", highlight=False)
            self._live.update(self._task, description=message)
        else:
            self._say(message)

    def audio(self, utterances: list[Any], seconds: float) -> None:
        """After each chunk: chunks, first audio, audio so far and the RTF up to now."""
        audio_s = sum(u.audio_s for u in utterances)
        firsts = [u.first_audio_s for u in utterances if u.first_audio_s is not None]
        first = min(firsts) if firsts else None
        if first is not None and not self._first_audio_said:
            self._first_audio_said = True
            line = f"first audio after {first:.2f} s"
            if self._live is not None:
                self._live.console.print(f"[dim]…[/] {line}", highlight=False)
            else:
                self._say(line)
        if self._live is not None and audio_s:
            chunks = sum(u.chunks for u in utterances)
            self._live.update(
                self._task,
                description=(
                    f"audio arriving: {chunks} chunk(s) · {audio_s:.2f} s of audio · "
                    f"RTF {seconds / audio_s:.2f}"
                ),
            )
