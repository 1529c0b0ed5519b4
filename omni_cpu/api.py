"""omni-cpu as a library: the names scripts (and examples/) use; the rest of omni_cpu may move.

Plan a machine (or read a checked-in profile), build requests for the model's task type,
then synthesize them, all at once or chunk by chunk as they stream:

    from pathlib import Path
    from omni_cpu import api

    info = api.read_model_info("checkpoints/tiny")
    requests = api.build_requests(info, ["Hello there."], "ryan", max_frames=50)
    plan = api.make_launch_plan("checkpoints/tiny", "auto")   # or a profile YAML
    api.prepare_process(plan)     # once, before torch loads: re-executes with the preloads
    result = api.synthesize(plan, requests, [Path("hello.wav")])
    print(result.audio_s, result.rtf)

`PipelineSession(plan)` keeps the engines up across calls (`session.generate(requests,
stream=True, on_chunk=...)`); `AtomicWavWriter` appends chunks to a WAV that appears only
when complete. Importing this module loads neither torch nor vLLM; `synthesize` and
`PipelineSession` load what they need when first used. Errors a user
can fix are `OmniCpuError`s; `error.one_line()` says the problem and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.errors import OmniCpuError
from omni_cpu.launch.plan import LaunchPlan, make_launch_plan
from omni_cpu.speech.ref_audio import read_reference_audio
from omni_cpu.speech.request import (
    TASK_TYPES,
    ModelInfo,
    SpeechRequest,
    build_requests,
    read_model_info,
)
from omni_cpu.speech.wav import AtomicWavWriter

if TYPE_CHECKING:
    from omni_cpu.launch.pipeline import PipelineSession
    from omni_cpu.launch.results import RunResult

__all__ = [
    "SAMPLE_RATE",
    "TASK_TYPES",
    "AtomicWavWriter",
    "LaunchPlan",
    "ModelInfo",
    "OmniCpuError",
    "PipelineSession",
    "SpeechRequest",
    "build_requests",
    "make_launch_plan",
    "prepare_process",
    "read_model_info",
    "read_reference_audio",
    "synthesize",
]


def prepare_process(plan: LaunchPlan) -> None:
    """Once, before torch loads: re-execute this script with the stages' preloads (LD_PRELOAD)
    so the stages can be forked from it; returns at once where that is not needed or not
    possible (the stages then start as fresh interpreters)."""
    from omni_cpu.launch.relaunch import relaunch_if_needed

    relaunch_if_needed(plan)


def synthesize(
    plan: LaunchPlan,
    requests: list[SpeechRequest],
    out_paths: list[Path],
    *,
    stream: bool = False,
    progress: Callable[[str], None] = lambda message: None,
) -> RunResult:
    """Start both stages, write each request's WAV (never half-written), stop every stage."""
    from omni_cpu.launch.pipeline import run_pipeline

    return run_pipeline(plan, requests, out_paths, stream=stream, progress=progress)


def __getattr__(name: str) -> Any:
    """`PipelineSession`, imported when first asked for (it loads the stages' platform)."""
    if name == "PipelineSession":
        from omni_cpu.launch.pipeline import PipelineSession

        return PipelineSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
