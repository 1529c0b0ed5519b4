"""What to say and how: texts, speaker, language, instruct, checked against the model's config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_cpu.errors import InputError, ModelError

FRAME_SAMPLES = 1920  # one 12.5 Hz codec frame at 24 kHz
SAMPLE_RATE = 24_000
DEFAULT_MAX_FRAMES = 2048  # vLLM-Omni's own default max_new_tokens for Qwen3-TTS


@dataclass(frozen=True)
class SpeechRequest:
    """One utterance to synthesize (vLLM-Omni's `additional_information` for Qwen3-TTS)."""

    text: str
    speaker: str
    language: str = "Auto"
    instruct: str = ""
    max_frames: int = DEFAULT_MAX_FRAMES

    def additional_information(self) -> dict[str, list[Any]]:
        """The talker's per-request inputs, each wrapped in a list as vLLM-Omni expects."""
        return {
            "task_type": ["CustomVoice"],
            "text": [self.text],
            "speaker": [self.speaker],
            "language": [self.language],
            "instruct": [self.instruct],
            "max_new_tokens": [self.max_frames],
        }


@dataclass(frozen=True)
class ModelInfo:
    """What `run` checks a request against, from a local checkpoint's config.json."""

    path: Path | None  # None for a hub id we cannot read offline
    speakers: tuple[str, ...]
    languages: tuple[str, ...]
    size: str  # tts_model_size, e.g. "0b6"

    @property
    def follows_instructions(self) -> bool:
        # Qwen3-TTS 0.6B CustomVoice ignores instructions (model card); 1.7B follows them.
        return self.size != "0b6"


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", ".", "~")) or Path(model).exists() or model.count("/") != 1


def read_model_info(model: str) -> ModelInfo:
    """Speakers, languages and size of a local checkpoint; an unknown hub id passes unchecked."""
    path = Path(model).expanduser()
    if not path.exists():
        if _looks_like_path(model):
            raise ModelError(
                f"model path {model} does not exist",
                "pass a checkpoint directory (omni-cpu make-checkpoint --size tiny --out DIR) "
                "or a Hugging Face id like Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
            )
        return ModelInfo(None, (), (), "")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelError(f"{path} has no config.json", "pass a Qwen3-TTS checkpoint directory")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelError(f"{config_file} does not read: {error}", "re-download it") from None
    if config.get("model_type") != "qwen3_tts":
        raise ModelError(
            f"{path} is a {config.get('model_type')!r} model, not Qwen3-TTS (qwen3_tts)",
            "pass a Qwen3-TTS checkpoint",
        )
    talker = config.get("talker_config") or {}
    languages = tuple(sorted(talker.get("codec_language_id") or {}))
    return ModelInfo(
        path=path,
        speakers=tuple(sorted(talker.get("spk_id") or {})),
        languages=languages,
        size=str(config.get("tts_model_size", "")),
    )


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


def build_requests(
    info: ModelInfo,
    texts: list[str],
    speaker: str,
    language: str = "auto",
    instruct: str | None = None,
    max_frames: int | None = None,
) -> list[SpeechRequest]:
    """Check speaker/language/instruct against the model and make one request per text."""
    speaker = speaker.strip().lower()
    if info.speakers and speaker not in info.speakers:
        raise InputError(
            f"unknown speaker {speaker!r}",
            f"this model's speakers are: {', '.join(info.speakers)}",
        )
    language = language.strip().lower()
    if info.languages and language != "auto" and language not in info.languages:
        raise InputError(
            f"unknown language {language!r}",
            f"use auto or one of: {', '.join(info.languages)}",
        )
    if instruct and info.path is not None and not info.follows_instructions:
        raise InputError(
            "--instruct is not supported by the 0.6B CustomVoice model",
            "drop --instruct, or use a 1.7B checkpoint",
        )
    if max_frames is not None and max_frames < 2:
        raise InputError(f"--max-frames {max_frames} is too small", "use 2 or more (80 ms each)")
    return [
        SpeechRequest(
            text=text,
            speaker=speaker,
            language=language.title(),
            instruct=instruct or "",
            max_frames=max_frames or DEFAULT_MAX_FRAMES,
        )
        for text in texts
    ]
