"""The voice options `run`, `bench` and `tune` share, declared once.

Task type, speaker, instruction and reference audio mean the same in every
command that synthesizes speech, so each is one `Annotated` option type here:
the commands spell, document and check them alike, and an option added for a
new kind reaches all three. `bench_request` is the one request `bench` and
`tune` measure, with their defaults for a voice the user did not give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from omni_cpu.launch.request import DEFAULT_SPEAKER, ModelInfo, SpeechRequest

BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and the CPU keeps up with speech."
BENCH_VOICE = "A calm, clear male voice at an even pace."

QueryTypeOption = Annotated[
    str | None,
    typer.Option(
        "--query-type", help="CustomVoice, VoiceDesign or Base (default: what the model is)."
    ),
]
SpeakerOption = Annotated[
    str | None,
    typer.Option(
        "--speaker",
        help=f"CustomVoice: a speaker from the model's config (default {DEFAULT_SPEAKER}).",
    ),
]
InstructOption = Annotated[
    str | None,
    typer.Option(
        "--instruct",
        help="VoiceDesign: the voice in words; CustomVoice 1.7B: a style instruction.",
    ),
]
RefAudioOption = Annotated[
    Path | None,
    typer.Option("--ref-audio", help="Base: the voice to clone (1-30 s; any rate and channels)."),
]
RefTextOption = Annotated[
    str | None, typer.Option("--ref-text", help="Base: what the reference audio says.")
]
XVectorOnlyOption = Annotated[
    bool,
    typer.Option(
        "--x-vector-only", help="Base: clone from the speaker embedding only (no --ref-text)."
    ),
]


def bench_request(
    info: ModelInfo,
    frames: int,
    query_type: str | None = None,
    speaker: str | None = None,
    instruct: str | None = None,
    ref_audio: Path | None = None,
    ref_text: str | None = None,
    x_vector_only: bool = False,
) -> SpeechRequest:
    """The request `bench` and `tune` repeat, checked (reference read) before any engine.

    A CustomVoice model speaks as `ryan` (or its first speaker when it has no ryan),
    a VoiceDesign model with BENCH_VOICE unless `instruct` says otherwise; Base needs
    its reference as `run` does.
    """
    from omni_cpu.bench.runner import check_query_type
    from omni_cpu.launch.ref_audio import read_reference_audio
    from omni_cpu.launch.request import build_requests

    task = query_type or info.task_type or "CustomVoice"
    task = check_query_type(task)
    if task == "CustomVoice" and speaker is None and DEFAULT_SPEAKER not in info.speakers:
        speaker = info.speakers[0] if info.speakers else None
    if task == "VoiceDesign" and instruct is None:
        instruct = BENCH_VOICE
    (request,) = build_requests(
        info,
        [BENCH_TEXT],
        speaker,
        instruct=instruct,
        max_frames=frames,
        query_type=None if query_type is None else task,
        ref_audio=None if ref_audio is None else read_reference_audio(ref_audio),
        ref_text=ref_text,
        x_vector_only=x_vector_only,
    )
    return request
