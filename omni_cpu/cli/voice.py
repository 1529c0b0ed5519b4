"""The voice options `run`, `bench` and `tune` share, declared once.

Task type, speaker, instruction and reference audio mean the same in every
command that synthesizes speech, so each is one `Annotated` option type here and
one field of `Voice`. A command takes `voice: Voice` and `@voice_options` offers
the fields as its options, so the commands spell, document and check them alike,
and an option added for a new kind is a field here and nothing else.
`bench_request` is the one request `bench` and `tune` measure, with their
defaults for a voice the user did not give.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from omni_cpu.speech.request import DEFAULT_SPEAKER, ModelInfo, SpeechRequest

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


@dataclass(frozen=True)
class Voice:
    """The voice a command line asked for, as given (None: not given; checked by `requests`)."""

    query_type: QueryTypeOption = None
    speaker: SpeakerOption = None
    instruct: InstructOption = None
    ref_audio: RefAudioOption = None
    ref_text: RefTextOption = None
    x_vector_only: XVectorOnlyOption = False

    def requests(
        self,
        info: ModelInfo,
        texts: list[str],
        language: str = "auto",
        max_frames: int | None = None,
    ) -> list[SpeechRequest]:
        """One request per text in this voice, checked against the model (reference read here)."""
        from omni_cpu.speech.ref_audio import read_reference_audio
        from omni_cpu.speech.request import build_requests

        return build_requests(
            info,
            texts,
            self.speaker,
            language,
            self.instruct,
            max_frames,
            query_type=self.query_type,
            ref_audio=None if self.ref_audio is None else read_reference_audio(self.ref_audio),
            ref_text=self.ref_text,
            x_vector_only=self.x_vector_only,
        )


Command = TypeVar("Command", bound=Callable[..., Any])


def voice_options(command: Command) -> Command:
    """`command` with its `voice: Voice` parameter offered as one option per `Voice` field.

    Typer reads a command's options from its signature: the fields (each an option
    type above) stand where `voice` stood, and the Voice is built from them once,
    before `command` runs.
    """
    signature = inspect.signature(command, eval_str=True)
    if "voice" not in signature.parameters:  # a duplicate name fails in replace() below
        raise TypeError(f"{command.__name__} takes no `voice: Voice` parameter")
    hints = typing.get_type_hints(Voice, include_extras=True)
    fields = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=field.default,
            annotation=hints[field.name],
        )
        for field in dataclasses.fields(Voice)
    ]
    names = [field.name for field in fields]
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        parameters.extend(fields if parameter.name == "voice" else [parameter])

    @functools.wraps(command)
    def with_voice(**options: Any) -> Any:
        voice = Voice(**{name: options.pop(name) for name in names})
        return command(**options, voice=voice)

    with_voice.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_voice.__annotations__ = {p.name: p.annotation for p in parameters}
    return typing.cast(Command, with_voice)


def bench_request(info: ModelInfo, frames: int, voice: Voice = Voice()) -> SpeechRequest:
    """The request `bench` and `tune` repeat, checked (reference read) before any engine.

    A CustomVoice model speaks as `ryan` (or its first speaker when it has no ryan),
    a VoiceDesign model with BENCH_VOICE unless the voice's `instruct` says
    otherwise; Base needs its reference as `run` does.
    """
    from omni_cpu.bench.sweep import check_query_type

    task = check_query_type(voice.query_type or info.task_type or "CustomVoice")
    speaker, instruct = voice.speaker, voice.instruct
    if task == "CustomVoice" and speaker is None and DEFAULT_SPEAKER not in info.speakers:
        speaker = info.speakers[0] if info.speakers else None
    if task == "VoiceDesign" and instruct is None:
        instruct = BENCH_VOICE
    filled = dataclasses.replace(
        voice,
        query_type=None if voice.query_type is None else task,
        speaker=speaker,
        instruct=instruct,
    )
    (request,) = filled.requests(info, [BENCH_TEXT], max_frames=frames)
    return request
