"""What one `run` produced: each utterance, the timings, and start-up phase by phase."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.platform import stage_startup


@dataclass
class Utterance:
    """One request's outcome."""

    index: int
    path: Path
    samples: int = 0
    chunks: int = 0
    first_audio_s: float | None = None  # since generation started

    @property
    def audio_s(self) -> float:
        return self.samples / SAMPLE_RATE


# Start-up, phase by phase, in the order they run in the driver (seconds each).
STARTUP_PHASES = {
    "runtime_import_s": "importing vLLM-Omni (torch, vLLM, transformers) in the driver",
    "engines_s": "Omni(): both stages' engine-core processes (each with its worker inside), "
    "the two stages at once (each: forked from the driver, or spawned and importing "
    "vLLM again; weights, KV cache)",
    "prompt_tokenizer_s": "the driver's text tokenizer and model config (prompt lengths)",
    "driver_relaunch_s": "the driver re-executing itself with its stages' preloads (the "
    "interpreter, the CLI and the plan a second time), so the stages can be forked",
}


@dataclass
class RunResult:
    """Timings and outputs of one `run`."""

    load_s: float
    wall_s: float  # generation only (after the engines are up)
    stream: bool
    utterances: list[Utterance]
    binding: dict[str, list[int]] = field(default_factory=dict)  # observed OpenMP binding
    stage_pids: list[int] = field(default_factory=list)
    startup: dict[str, float] = field(default_factory=dict)  # STARTUP_PHASES -> seconds
    # Each stage's own phases (omni_cpu.platform.stage_startup), inside engines_s.
    stage_startup: dict[str, dict[str, Any]] = field(default_factory=dict)
    stage_start: str = ""  # "fork" or "spawn" (choose_stage_start)

    @property
    def audio_s(self) -> float:
        return sum(u.audio_s for u in self.utterances)

    @property
    def rtf(self) -> float | None:
        """Wall seconds per audio second (below 1 is faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else None

    @property
    def ttfa_s(self) -> float | None:
        """Time to the first audio of the first utterance."""
        firsts = [u.first_audio_s for u in self.utterances if u.first_audio_s is not None]
        return min(firsts) if firsts else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "load_s": round(self.load_s, 3),
            "wall_s": round(self.wall_s, 3),
            "audio_s": round(self.audio_s, 3),
            "rtf": None if self.rtf is None else round(self.rtf, 3),
            "ttfa_s": None if self.ttfa_s is None else round(self.ttfa_s, 3),
            "stream": self.stream,
            "sample_rate": SAMPLE_RATE,
            "outputs": [
                {
                    "path": str(u.path),
                    "audio_s": round(u.audio_s, 3),
                    "samples": u.samples,
                    "chunks": u.chunks,
                    "first_audio_s": None if u.first_audio_s is None else round(u.first_audio_s, 3),
                }
                for u in self.utterances
            ],
            "binding": self.binding,
            "startup": startup_dict(self.startup, self.stage_startup),
            "stage_start": self.stage_start,
        }


def startup_dict(
    phases: dict[str, float], stages: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Start-up by phase for --json: each phase's seconds, their total, what each one is.

    `stages`: what each stage measured inside its own process (weights, packing); it
    lies within `engines_s`, so `total_s` stays the driver's phases alone.
    """
    rounded = {name: round(seconds, 3) for name, seconds in phases.items()}
    shown: dict[str, Any] = {
        **rounded,
        "total_s": round(sum(phases.values()), 3),
        "phases": {name: STARTUP_PHASES[name] for name in phases},
    }
    if stages:
        shown["stages"] = stages
        seen = {name for record in stages.values() for name in record}
        shown["stage_phases"] = {
            name: text for name, text in stage_startup.STAGE_PHASES.items() if name in seen
        }
    return shown
