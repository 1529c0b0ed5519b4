"""What to say and how: texts, task type, speaker or voice, checked against the model's config.

Qwen3-TTS has three task types, one per published kind of checkpoint: CustomVoice
(a preset `--speaker`, plus `--instruct` on the 1.7B), VoiceDesign (a voice described
by `--instruct`) and Base (a voice cloned from `--ref-audio`, with its transcript
`--ref-text`, or from the speaker embedding alone with `--x-vector-only`). Every
mismatch between what is asked and what the model is becomes one `InputError` here,
before any engine starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_cpu.checkpoint.configs import KIND_TABLE
from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.checkpoint.locate import checkpoint_folder, read_configs
from omni_cpu.errors import InputError

if TYPE_CHECKING:
    from omni_cpu.speech.ref_audio import ReferenceAudio

DEFAULT_MAX_FRAMES = 2048  # vLLM-Omni's own default max_new_tokens for Qwen3-TTS
DEFAULT_SPEAKER = "ryan"

TASK_TYPES: tuple[str, ...] = tuple(task for _, _, task in KIND_TABLE)
# config.json `tts_model_type` -> the task type vLLM-Omni serves for it.
TASK_OF_MODEL_TYPE: dict[str, str] = {model_type: task for _, model_type, task in KIND_TABLE}
# The matching `omni-cpu make-checkpoint --kind`.
KIND_OF_TASK: dict[str, str] = {task: kind for kind, _, task in KIND_TABLE}


@dataclass(frozen=True)
class SpeechRequest:
    """One utterance to synthesize (vLLM-Omni's `additional_information` for Qwen3-TTS)."""

    text: str
    speaker: str = ""
    language: str = "Auto"
    instruct: str = ""
    max_frames: int = DEFAULT_MAX_FRAMES
    task_type: str = "CustomVoice"
    ref_audio: ReferenceAudio | None = None
    ref_text: str = ""
    x_vector_only: bool = False

    def additional_information(self) -> dict[str, list[Any]]:
        """The talker's per-request inputs, each wrapped in a list as vLLM-Omni expects.

        The same fields vLLM-Omni's own speech server sends for each task type
        (tts_adapters/qwen3_tts.py): VoiceDesign in non-streaming prompt mode, Base
        with the reference as `[[samples, rate]]` and its codec frame count.
        """
        info: dict[str, list[Any]] = {
            "task_type": [self.task_type],
            "text": [self.text],
            "language": [self.language],
            "instruct": [self.instruct],
            "max_new_tokens": [self.max_frames],
        }
        if self.task_type == "CustomVoice":
            info["speaker"] = [self.speaker]
        elif self.task_type == "VoiceDesign":
            info["non_streaming_mode"] = [True]
        elif self.ref_audio is not None:
            info["ref_audio"] = [[self.ref_audio.samples.tolist(), SAMPLE_RATE]]
            info["x_vector_only_mode"] = [self.x_vector_only]
            if not self.x_vector_only:
                info["ref_text"] = [self.ref_text]
                info["ref_code_length"] = [self.ref_audio.code_frames]
        return info


@dataclass(frozen=True)
class ModelInfo:
    """What `run` checks a request against, from a local checkpoint's config.json."""

    path: Path | None  # None for a hub id we cannot read offline
    speakers: tuple[str, ...]
    languages: tuple[str, ...]
    size: str  # tts_model_size, e.g. "0b6"
    task_type: str = ""  # CustomVoice / VoiceDesign / Base; "" when unknown (hub id)

    @property
    def follows_instructions(self) -> bool:
        # Qwen3-TTS 0.6B CustomVoice ignores instructions (model card); 1.7B follows them.
        return self.size != "0b6"


def read_model_info(model: str) -> ModelInfo:
    """Speakers, languages and size of a local (or cached) checkpoint; a hub id not in the
    cache passes unchecked (omni_cpu.checkpoint.locate.check_model looks it up)."""
    folder = checkpoint_folder(model)
    if folder is None:
        return ModelInfo(None, (), (), "", _task_from_hub_id(model))
    config, _ = read_configs(folder)
    talker = config.get("talker_config") or {}
    languages = tuple(sorted(talker.get("codec_language_id") or {}))
    return ModelInfo(
        path=folder,
        speakers=tuple(sorted(talker.get("spk_id") or {})),
        languages=languages,
        size=str(config.get("tts_model_size", "")),
        task_type=TASK_OF_MODEL_TYPE.get(str(config.get("tts_model_type", "")), "CustomVoice"),
    )


def _task_from_hub_id(model: str) -> str:
    """Qwen's hub ids end in the kind: Qwen/Qwen3-TTS-12Hz-1.7B-Base, ...-VoiceDesign."""
    for task in TASK_TYPES:
        if model.lower().endswith(task.lower()):
            return task
    return ""


def read_texts(text: str | None, text_file: Path | None) -> list[str]:
    """The utterances: `--text`, or one per non-empty line of `--text-file`."""
    if (text is None) == (text_file is None):
        raise InputError("give exactly one of --text and --text-file", "e.g. --text 'Hello'")
    if text_file is not None:
        try:
            lines = text_file.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise InputError(
                f"cannot read {text_file}: {error.strerror}", "check the path"
            ) from None
        texts = [line.strip() for line in lines if line.strip()]
        if not texts:
            raise InputError(f"{text_file} has no text", "write one utterance per line")
        return texts
    assert text is not None
    if not text.strip():
        raise InputError("the text is empty", "pass something to say, e.g. --text 'Hello'")
    return [text.strip()]


def _task_type(info: ModelInfo, query_type: str | None, ref_audio: object) -> str:
    if query_type is not None:
        matches = [t for t in TASK_TYPES if t.lower() == query_type.strip().lower()]
        if not matches:
            raise InputError(
                f"unknown --query-type {query_type!r}", f"use one of {', '.join(TASK_TYPES)}"
            )
        task = matches[0]
        if info.task_type and task != info.task_type:
            raise InputError(
                f"--query-type {task} does not fit this model: it is a {info.task_type} model",
                f"use --query-type {info.task_type}, or a {task} checkpoint "
                f"(omni-cpu make-checkpoint --kind {KIND_OF_TASK[task]})",
            )
        return task
    if info.task_type:
        return info.task_type
    return "Base" if ref_audio is not None else "CustomVoice"


def _check_voice(
    task: str,
    info: ModelInfo,
    speaker: str | None,
    instruct: str | None,
    ref_audio: object,
    ref_text: str | None,
    x_vector_only: bool,
) -> None:
    """The one-line mistakes of asking a model for a voice it cannot make."""
    if task != "Base":
        for given, option in (
            (ref_audio is not None, "--ref-audio"),
            (ref_text is not None, "--ref-text"),
            (x_vector_only, "--x-vector-only"),
        ):
            if given:
                raise InputError(
                    f"{option} is for Base (voice clone) models; this is a {task} model",
                    f"drop {option}, or pass a Base checkpoint "
                    "(omni-cpu make-checkpoint --kind base)",
                )
    if task == "CustomVoice":
        return
    if speaker is not None:
        source = "--ref-audio" if task == "Base" else "--instruct"
        raise InputError(
            f"--speaker is for CustomVoice models; a {task} model takes its voice from {source}",
            "drop --speaker",
        )
    if task == "VoiceDesign":
        if not (instruct or "").strip():
            raise InputError(
                "a VoiceDesign model needs --instruct describing the voice",
                "e.g. --instruct 'A warm, low female voice, speaking slowly'",
            )
        return
    if instruct:
        raise InputError(
            "--instruct is not supported by Base models (they clone --ref-audio's voice)",
            "drop --instruct, or use a VoiceDesign or 1.7B CustomVoice model",
        )
    if ref_audio is None:
        raise InputError(
            "a Base model needs --ref-audio FILE: a few seconds of the voice to clone",
            "e.g. --ref-audio voice.wav --ref-text 'what the clip says'",
        )
    if not x_vector_only and not (ref_text or "").strip():
        raise InputError(
            "--ref-text is needed with --ref-audio: the transcript of the reference clip",
            "pass --ref-text 'what the clip says', or --x-vector-only to clone the timbre only",
        )


def build_requests(
    info: ModelInfo,
    texts: list[str],
    speaker: str | None,
    language: str = "auto",
    instruct: str | None = None,
    max_frames: int | None = None,
    *,
    query_type: str | None = None,
    ref_audio: ReferenceAudio | None = None,
    ref_text: str | None = None,
    x_vector_only: bool = False,
) -> list[SpeechRequest]:
    """Check the task type and voice against the model and make one request per text."""
    task = _task_type(info, query_type, ref_audio)
    _check_voice(task, info, speaker, instruct, ref_audio, ref_text, x_vector_only)
    chosen = ""
    if task == "CustomVoice":
        chosen = (speaker or DEFAULT_SPEAKER).strip().lower()
        if info.speakers and chosen not in info.speakers:
            raise InputError(
                f"unknown speaker {chosen!r}",
                f"this model's speakers are: {', '.join(info.speakers)}",
            )
    language = language.strip().lower()
    if info.languages and language != "auto" and language not in info.languages:
        raise InputError(
            f"unknown language {language!r}",
            f"use auto or one of: {', '.join(info.languages)}",
        )
    if (
        task == "CustomVoice"
        and instruct
        and info.path is not None
        and not info.follows_instructions
    ):
        raise InputError(
            "--instruct is not supported by the 0.6B CustomVoice model",
            "drop --instruct, or use a 1.7B checkpoint",
        )
    if max_frames is not None and max_frames < 2:
        raise InputError(f"--max-frames {max_frames} is too small", "use 2 or more (80 ms each)")
    return [
        SpeechRequest(
            text=text,
            speaker=chosen,
            language=language.title(),
            instruct=instruct or "",
            max_frames=max_frames or DEFAULT_MAX_FRAMES,
            task_type=task,
            ref_audio=ref_audio,
            ref_text=(ref_text or "").strip(),
            x_vector_only=x_vector_only,
        )
        for text in texts
    ]
