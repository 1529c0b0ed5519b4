"""A model's resource footprint, computed from its config (never typed in).

The planner needs, per stage: bytes of weights and bytes of KV cache per token.
Weights are counted from the exact tensor layout the config implies (the same
layout the checkpoint generator writes), so a config change moves the plan.

Where each part runs (vllm-omni 0.30.0): the talker stage holds the talker, the
code predictor, the speaker encoder (built for every kind, loaded from the
checkpoint for Base) and the speech tokenizer's encoder (reference audio to codes,
always cast to bfloat16); the code2wav stage holds only the tokenizer's decoder.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_cpu.errors import ModelError
from omni_cpu.weight_formats import get as weight_format

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1}
KNOWN_SIZES = ("0.6b", "1.7b", "tiny")
# vLLM-Omni's talker casts the speech tokenizer's encoder to bfloat16 whatever the stage dtype.
TOKENIZER_ENCODER_DTYPE = "bfloat16"
# Tensors the talker stage views in the checkpoint file where the stage's dtype is theirs
# (omni_cpu.platform.talker_load.MAPPED_EMBEDDINGS) rather than copying: resident only as
# their rows are read (a prompt's tokens), clean page cache the kernel can take back, so
# not counted in the stage's memory. A stage of another dtype converts and holds them.
MAPPED_TENSORS = ("talker.model.text_embedding.weight",)
# config.json tts_model_type -> make-checkpoint --kind
KIND_OF_MODEL_TYPE = {
    "custom_voice": "custom-voice",
    "voice_design": "voice-design",
    "base": "base",
}


def linear_weight_bytes(dtype: str, weights: str = "model") -> float:
    """Bytes of one talker linear-layer weight in a weight format (omni_cpu.weight_formats)."""
    packed = weight_format(weights).bytes_per_weight
    return DTYPE_BYTES[dtype] if packed is None else packed


@dataclass(frozen=True)
class ModelFootprint:
    """What one Qwen3-TTS pipeline costs, independent of the machine."""

    name: str
    talker_params: int  # model.safetensors: talker + code predictor + text side
    code2wav_params: int  # speech_tokenizer/model.safetensors
    talker_layers: int
    talker_kv_heads: int
    talker_head_dim: int
    speakers: tuple[str, ...]
    languages: tuple[str, ...]
    supports_instruct: bool
    kind: str = "custom-voice"  # custom-voice, voice-design or base (config tts_model_type)
    speaker_encoder_params: int = 0  # ECAPA-TDNN x-vector encoder, in the talker stage
    tokenizer_encoder_params: int = 0  # reference audio -> codes, in the talker stage
    # Weights read from memory to make one audio frame at batch 1: the talker's
    # layers and codec head once, the code predictor's layers and one of its heads
    # once per residual codebook (15 times). Embeddings are looked up, not streamed.
    streamed_params_per_frame: int = 0
    # The talker stage's linear-layer weights (talker and code predictor layers and
    # heads): what `--weights int8` packs to one byte each.
    talker_linear_params: int = 0
    # MAPPED_TENSORS' values and the dtype the checkpoint stores them in.
    mapped_params: int = 0
    mapped_dtype: str = "bfloat16"

    def streamed_bytes_per_frame(self, dtype: str, weights: str = "model") -> int:
        """Bytes of weights one frame streams at batch 1, in the weight format `weights`."""
        return int(self.streamed_params_per_frame * linear_weight_bytes(dtype, weights))

    def talker_weight_bytes(self, dtype: str, weights: str = "model") -> int:
        """The talker stage: talker, code predictor, speaker encoder and tokenizer encoder.

        In a packed weight format (`--weights int8`) the talker's and code predictor's
        linear layers take that format's bytes each; the rest keeps the stage dtype, but
        for the MAPPED_TENSORS where the stage's dtype is the checkpoint's (not counted).
        """
        encoders = (
            self.speaker_encoder_params * DTYPE_BYTES[dtype]
            + self.tokenizer_encoder_params * DTYPE_BYTES[TOKENIZER_ENCODER_DTYPE]
        )
        mapped = self.mapped_params if dtype == self.mapped_dtype else 0
        rest = self.talker_params - self.talker_linear_params - mapped
        linear = self.talker_linear_params * linear_weight_bytes(dtype, weights)
        return int(rest * DTYPE_BYTES[dtype] + linear) + encoders

    def code2wav_weight_bytes(self, dtype: str) -> int:
        return self.code2wav_params * DTYPE_BYTES[dtype]

    def talker_kv_bytes_per_token(self, dtype: str) -> int:
        """K and V for every talker layer: 2 * layers * kv_heads * head_dim * bytes."""
        return (2 * self.talker_layers * self.talker_kv_heads * self.talker_head_dim) * DTYPE_BYTES[
            dtype
        ]


def _count_params(layout: dict[str, Any]) -> int:
    return sum(math.prod(shape) for shape, _dtype in layout.values())


def _streamed_params_per_frame(layout: dict[str, Any], residual_groups: int) -> int:
    def matrices(prefix: str) -> int:
        return sum(
            math.prod(shape)
            for name, (shape, _dtype) in layout.items()
            if name.startswith(prefix) and len(shape) == 2
        )

    talker = matrices("talker.model.layers.") + matrices("talker.codec_head.")
    predictor_step = (
        matrices("talker.code_predictor.model.layers.")
        + matrices("talker.code_predictor.lm_head.0.")
        + matrices("talker.code_predictor.small_to_mtp_projection.")
    )
    return talker + residual_groups * predictor_step


def _linear_params(layout: dict[str, Any]) -> int:
    prefixes = (
        "talker.model.layers.",
        "talker.codec_head.",
        "talker.code_predictor.model.layers.",
        "talker.code_predictor.lm_head.",
    )
    return sum(
        math.prod(shape)
        for name, (shape, _dtype) in layout.items()
        if name.startswith(prefixes) and len(shape) == 2
    )


def footprint_from_configs(
    name: str, config: dict[str, Any], speech_tokenizer_config: dict[str, Any]
) -> ModelFootprint:
    """Compute the footprint from config.json and speech_tokenizer/config.json."""
    from omni_cpu.checkpoint.layout import model_layout, speech_tokenizer_layout

    try:
        talker = config["talker_config"]
        layers = int(talker["num_hidden_layers"])
        kv_heads = int(talker["num_key_value_heads"])
        head_dim = int(
            talker.get("head_dim") or talker["hidden_size"] // talker["num_attention_heads"]
        )
        speakers = tuple(sorted(talker.get("spk_id", {})))
        languages = tuple(sorted(talker.get("codec_language_id", {})))
    except (KeyError, TypeError, ValueError) as missing:
        raise ModelError(
            f"{name}: config.json lacks talker_config field {missing}",
            "point --model at a Qwen3-TTS checkpoint directory",
        ) from None
    layout = model_layout(config)
    tokenizer = speech_tokenizer_layout(speech_tokenizer_config)
    mapped = [layout[name] for name in MAPPED_TENSORS if name in layout]
    # vLLM-Omni builds the speaker encoder for every kind; only Base ships its weights.
    speaker = {
        name: spec
        for name, spec in model_layout({**config, "tts_model_type": "base"}).items()
        if name.startswith("speaker_encoder.")
    }
    return ModelFootprint(
        name=name,
        talker_params=_count_params(
            {k: v for k, v in layout.items() if not k.startswith("speaker_encoder.")}
        ),
        code2wav_params=_count_params(
            {k: v for k, v in tokenizer.items() if k.startswith("decoder.")}
        ),
        kind=KIND_OF_MODEL_TYPE.get(str(config.get("tts_model_type")), "custom-voice"),
        speaker_encoder_params=_count_params(speaker),
        tokenizer_encoder_params=_count_params(
            {k: v for k, v in tokenizer.items() if k.startswith("encoder.")}
        ),
        talker_layers=layers,
        talker_kv_heads=kv_heads,
        talker_head_dim=head_dim,
        speakers=speakers,
        languages=languages,
        # The 0.6B model drops `instruct` (qwen-tts generate_custom_voice).
        supports_instruct=config.get("tts_model_size") != "0b6",
        streamed_params_per_frame=_streamed_params_per_frame(
            layout, int(talker.get("num_code_groups", 16)) - 1
        ),
        talker_linear_params=_linear_params(layout),
        mapped_params=sum(math.prod(spec.shape) for spec in mapped),
        mapped_dtype=mapped[0].dtype if mapped else "bfloat16",
    )


def _kind_from_name(spec: str) -> str:
    """Qwen's ids and omni-cpu's footprint names end in the kind (…-Base, …-voice-design)."""
    flat = re.sub(r"[^a-z]", "", spec.lower())
    for kind in ("voice-design", "base", "custom-voice"):
        if flat.endswith(kind.replace("-", "")):
            return kind
    return "custom-voice"


def _size_from_name(spec: str) -> str | None:
    lowered = spec.lower()
    if lowered in KNOWN_SIZES:
        return lowered
    match = re.search(r"(0\.6|0b6|1\.7|1b7)", lowered)
    if match:
        return "0.6b" if match.group(1) in ("0.6", "0b6") else "1.7b"
    return None


def footprint_for_model(spec: str | None) -> ModelFootprint:
    """Footprint for a size name ("0.6b"), a checkpoint directory, or a hub id.

    A directory's own config.json wins, then a hub id's in the hub's cache; a hub id
    not in the cache is matched to a known size by its name (nothing is downloaded).
    """
    from omni_cpu.checkpoint.configs import model_config, speech_tokenizer_config
    from omni_cpu.checkpoint.locate import cached_snapshot, looks_like_hub_id, read_configs

    spec = spec or "0.6b"
    path = Path(spec).expanduser()
    if path.is_dir():
        config, st_config = read_configs(path)
        return footprint_from_configs(path.name, config, st_config)
    if looks_like_hub_id(spec) and (snapshot := cached_snapshot(spec)) is not None:
        config, st_config = read_configs(snapshot)
        return footprint_from_configs(spec.split("/")[1].lower(), config, st_config)
    size = _size_from_name(spec)
    if size is None:
        raise ModelError(
            f"unknown model {spec!r}",
            "use a checkpoint directory, a Qwen3-TTS hub id, or one of " + ", ".join(KNOWN_SIZES),
        )
    kind = _kind_from_name(spec)
    name = f"qwen3-tts-12hz-{size}" + ("" if kind == "custom-voice" else f"-{kind}")
    try:
        config = model_config(size, kind)
    except ValueError as unpublished:
        raise ModelError(str(unpublished), "pick a size Qwen publishes for it") from None
    return footprint_from_configs(name, config, speech_tokenizer_config(size))
