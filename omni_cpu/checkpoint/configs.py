"""The small JSON files of a Qwen3-TTS-12Hz checkpoint, per model kind and size.

`"0.6b"` is Qwen3-TTS-12Hz-0.6B-CustomVoice exactly as published (the values of its
config.json on the Hugging Face Hub, which every public port agrees with).

`"1.7b"` is Qwen3-TTS-12Hz-1.7B-CustomVoice: the same file with a wider talker
(hidden 2048, MLP 6144) and `tts_model_size` "1b7". Sources: the 2048 talker width
is in public ports (ivan-digital/qwen3-asr-swift docs/tts-model.md; a C port's
tts_native.h: "Supports 0.6B (talker_hidden=1024) and 1.7B (talker_hidden=2048)";
a Python port's comment "codec_embedding is [2048, 2048]" for the code predictor).
The MLP width is pinned by the published file size: a public download manifest
lists the 1.7B `model.safetensors` at 3,833,402,552 bytes, which is what this
layout gives with intermediate 6144 (the swift doc's 8192 would give 4.54 GB).
The code predictor keeps hidden 1024, so the 1.7B carries
`small_to_mtp_projection` (Linear 2048→1024 with bias).

`"tiny"` keeps every key, special id, codec id, speaker, language, the 16 code
groups and the 12.5 Hz / 1920-samples-per-frame geometry, and shrinks widths and
depths so that loading it through vLLM's CPU backend takes seconds. Vocab sizes
that ids index into stay real: the text vocab must hold id 151675 and the codec
vocab speaker id 3066. head_dim stays 64 (vLLM's CPU attention rejects 16), and
M-RoPE's sections are scaled to sum to head_dim / 2 as the real ones do.

Kinds (`tts_model_type`): CustomVoice (9 preset speakers), VoiceDesign (a voice
described in words) and Base (a voice cloned from reference audio). Qwen publishes
CustomVoice 0.6B and 1.7B, VoiceDesign 1.7B, Base 0.6B and 1.7B; `tiny` exists for
every kind. VoiceDesign and Base differ from CustomVoice in config.json only in
`tts_model_type`, empty `spk_id` / `spk_is_dialect` and the ten languages without
the two dialect ids (the published Base and VoiceDesign configs as quoted by the
MLX port's tests, mlx-community/Qwen3-TTS-12Hz-1.7B-{Base,VoiceDesign}-bf16); the
speaker encoder's width follows the talker's (`enc_dim` 2048 for 1.7B Base, which
that port's tests also quote). Only Base ships speaker-encoder weights.
"""

from __future__ import annotations

import copy
from typing import Any

SIZES: tuple[str, ...] = ("tiny", "0.6b", "1.7b")
# Each published kind: `make-checkpoint --kind`, config.json's `tts_model_type`, and the
# task type vLLM-Omni serves for it. The one table: omni_cpu.speech.request reads it
# the other way round (a config's model type to its task, a task to the kind to make).
KIND_TABLE: tuple[tuple[str, str, str], ...] = (
    ("custom-voice", "custom_voice", "CustomVoice"),
    ("voice-design", "voice_design", "VoiceDesign"),
    ("base", "base", "Base"),
)
KINDS: tuple[str, ...] = tuple(kind for kind, _, _ in KIND_TABLE)
DEFAULT_KIND = "custom-voice"
TTS_MODEL_TYPES: dict[str, str] = {kind: model_type for kind, model_type, _ in KIND_TABLE}

# (kind, size) pairs Qwen publishes; tiny is ours, for every kind.
PUBLISHED: frozenset[tuple[str, str]] = frozenset(
    {
        ("custom-voice", "0.6b"),
        ("custom-voice", "1.7b"),
        ("voice-design", "1.7b"),
        ("base", "0.6b"),
        ("base", "1.7b"),
    }
)
_DIALECTS = ("beijing_dialect", "sichuan_dialect")

# --- Qwen3-TTS-12Hz-0.6B-CustomVoice, config.json -----------------------------

_CONFIG_0_6B: dict[str, Any] = {
    "architectures": ["Qwen3TTSForConditionalGeneration"],
    "model_type": "qwen3_tts",
    "tokenizer_type": "qwen3_tts_tokenizer_12hz",
    "tts_model_size": "0b6",
    "tts_model_type": "custom_voice",
    "assistant_token_id": 77091,
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672,
    "tts_eos_token_id": 151673,
    "torch_dtype": "bfloat16",
    "speaker_encoder_config": {"enc_dim": 1024, "sample_rate": 24000},
    "talker_config": {
        "model_type": "qwen3_tts_talker",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_type": "default",
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "vocab_size": 3072,
        "text_vocab_size": 151936,
        "text_hidden_size": 2048,
        "num_code_groups": 16,
        "position_id_per_seconds": 13,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "codec_language_id": {
            "chinese": 2055,
            "english": 2050,
            "german": 2053,
            "italian": 2070,
            "portuguese": 2071,
            "spanish": 2054,
            "japanese": 2058,
            "korean": 2064,
            "french": 2061,
            "russian": 2069,
            "beijing_dialect": 2074,
            "sichuan_dialect": 2062,
        },
        "spk_id": {
            "serena": 3066,
            "vivian": 3065,
            "uncle_fu": 3010,
            "ryan": 3061,
            "aiden": 2861,
            "ono_anna": 2873,
            "sohee": 2864,
            "eric": 2875,
            "dylan": 2878,
        },
        "spk_is_dialect": {
            "serena": False,
            "vivian": False,
            "uncle_fu": False,
            "ryan": False,
            "aiden": False,
            "ono_anna": False,
            "sohee": False,
            "eric": "sichuan_dialect",
            "dylan": "beijing_dialect",
        },
        "code_predictor_config": {
            "model_type": "qwen3_tts_talker_code_predictor",
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 5,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "max_position_embeddings": 65536,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": 28,
            "layer_types": ["full_attention"] * 5,
            "vocab_size": 2048,
            "num_code_groups": 16,
        },
    },
}

# --- speech_tokenizer/config.json (Qwen3-TTS-Tokenizer-12Hz; same for every size) --

_SPEECH_TOKENIZER_REAL: dict[str, Any] = {
    "architectures": ["Qwen3TTSTokenizerV2Model"],
    "model_type": "qwen3_tts_tokenizer_12hz",
    "encoder_valid_num_quantizers": 16,
    "input_sample_rate": 24000,
    "output_sample_rate": 24000,
    "decode_upsample_rate": 1920,
    "encode_downsample_rate": 1920,
    "decoder_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "latent_dim": 1024,
        "codebook_dim": 512,
        "codebook_size": 2048,
        "decoder_dim": 1536,
        "hidden_act": "silu",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "head_dim": 64,
        "num_attention_heads": 16,
        "num_hidden_layers": 8,
        "num_key_value_heads": 16,
        "num_quantizers": 16,
        "num_semantic_quantizers": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000,
        "semantic_codebook_size": 4096,
        "sliding_window": 72,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "vector_quantization_hidden_dimension": 512,
    },
    "encoder_config": {
        "_frame_rate": 12.5,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "audio_channels": 1,
        "codebook_dim": 256,
        "codebook_size": 2048,
        "compress": 2,
        "dilation_growth_rate": 2,
        "frame_rate": 12.5,
        "head_dim": 64,
        "hidden_act": "gelu",
        "hidden_size": 512,
        "intermediate_size": 2048,
        "kernel_size": 7,
        "last_kernel_size": 3,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "norm_eps": 1e-05,
        "num_attention_heads": 8,
        "num_filters": 64,
        "num_hidden_layers": 8,
        "num_key_value_heads": 8,
        "num_quantizers": 32,
        "num_residual_layers": 1,
        "num_semantic_quantizers": 1,
        "pad_mode": "constant",
        "residual_kernel_size": 3,
        "rope_theta": 10000.0,
        "sampling_rate": 24000,
        "sliding_window": 250,
        "trim_right_ratio": 1.0,
        "upsample_groups": 512,
        "upsampling_ratios": [8, 6, 5, 4],
        "use_causal_conv": True,
        "use_conv_shortcut": False,
        "vector_quantization_hidden_dimension": 256,
    },
}

_GENERATION_CONFIG: dict[str, Any] = {
    "do_sample": True,
    "top_k": 50,
    "top_p": 1.0,
    "temperature": 0.9,
    "repetition_penalty": 1.05,
    "subtalker_dosample": True,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "subtalker_temperature": 0.9,
    "max_new_tokens": 8192,
}

_PREPROCESSOR_CONFIG: dict[str, Any] = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 24000,
}

# Qwen2/Qwen3's added tokens (151643..151668) plus the TTS ones (151669..151675).
# `special` is False where Qwen3's own tokenizer_config marks it so (tool/think tags):
# those stay splittable text for the chat template.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
    (151669, "<|audio_start|>", True),
    (151670, "<|audio_end|>", True),
    (151671, "<tts_pad>", True),
    (151672, "<tts_text_bos>", True),
    (151673, "<tts_text_eod>", True),
    (151674, "<tts_text_bos_single>", True),
    (151675, "<|audio_pad|>", True),
)

# Ids below this are the byte-level BPE's regular tokens (vocab.json + merges.txt).
REGULAR_VOCAB_SIZE = 151643


def _check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown checkpoint size {size!r}; expected one of {', '.join(SIZES)}")


def check_kind(kind: str, size: str) -> None:
    """Refuse an unknown kind, or a kind/size pair that Qwen does not publish (tiny: all)."""
    _check_size(size)
    if kind not in KINDS:
        raise ValueError(f"unknown checkpoint kind {kind!r}; expected one of {', '.join(KINDS)}")
    if size != "tiny" and (kind, size) not in PUBLISHED:
        sizes = sorted(s for k, s in PUBLISHED if k == kind)
        raise ValueError(
            f"Qwen3-TTS {kind} is not published at {size}; "
            f"it exists at {', '.join(sizes)} (and tiny)"
        )


def model_config(
    size: str, kind: str = DEFAULT_KIND, kv_heads: int | None = None
) -> dict[str, Any]:
    """The config.json dict for a checkpoint size ("tiny", "0.6b", "1.7b") and kind.

    `kv_heads` (tiny only) gives the talker and its code predictor that many KV heads and
    twice as many query heads, as the published models have (8 and 16); tiny has 1 and 2.
    """
    check_kind(kind, size)
    if kv_heads is not None and (size != "tiny" or kv_heads < 1):
        raise ValueError(f"kv_heads={kv_heads}: only a tiny checkpoint takes a head count >= 1")
    config = copy.deepcopy(_CONFIG_0_6B)
    talker = config["talker_config"]
    predictor = talker["code_predictor_config"]
    config["tts_model_type"] = TTS_MODEL_TYPES[kind]
    if kind != "custom-voice":
        talker["spk_id"] = {}
        talker["spk_is_dialect"] = {}
        for dialect in _DIALECTS:
            del talker["codec_language_id"][dialect]
    if size == "1.7b" or (size == "tiny" and kind == "voice-design"):
        # VoiceDesign exists only at 1.7B, and it follows instructions.
        config["tts_model_size"] = "1b7"
    if size == "1.7b":
        # The speaker encoder's output is a talker input, so it follows the talker width.
        config["speaker_encoder_config"]["enc_dim"] = 2048
        talker.update(hidden_size=2048, intermediate_size=6144)
    elif size == "tiny":
        config["speaker_encoder_config"]["enc_dim"] = 128
        # The talker and its code predictor: one small decoder shape for both.
        layers = {
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 64,
        }
        talker.update(layers, text_hidden_size=64)
        # [24, 20, 20] sums to 64 = 128 / 2; keep the same proportions for head_dim 64.
        talker["rope_scaling"]["mrope_section"] = [12, 10, 10]
        predictor.update(layers, layer_types=["full_attention"] * 2)
        if kv_heads is not None:
            for part in (talker, predictor):
                part.update(num_attention_heads=2 * kv_heads, num_key_value_heads=kv_heads)
    return config


def speech_tokenizer_config(size: str) -> dict[str, Any]:
    """speech_tokenizer/config.json: the real codec for 0.6b/1.7b, a narrow one for tiny.

    Tiny keeps 16 codebooks of 2048 entries, 24 kHz, the upsample rates (product
    1920 per frame) and the encoder's SEANet ratios, so frame geometry is real.
    """
    _check_size(size)
    config = copy.deepcopy(_SPEECH_TOKENIZER_REAL)
    if size == "tiny":
        config["decoder_config"].update(
            latent_dim=64,
            codebook_dim=64,
            decoder_dim=128,
            hidden_size=64,
            intermediate_size=128,
            head_dim=32,
            num_attention_heads=2,
            num_key_value_heads=2,
            num_hidden_layers=2,
            vector_quantization_hidden_dimension=64,
        )
        config["encoder_config"].update(
            codebook_dim=32,
            hidden_size=64,
            intermediate_size=128,
            head_dim=32,
            num_attention_heads=2,
            num_key_value_heads=2,
            num_filters=8,
            num_hidden_layers=2,
            num_quantizers=16,
            upsample_groups=64,
            vector_quantization_hidden_dimension=32,
        )
    return config


def generation_config(size: str) -> dict[str, Any]:
    """generation_config.json (the same sampling defaults for every size)."""
    _check_size(size)
    return copy.deepcopy(_GENERATION_CONFIG)


def preprocessor_config() -> dict[str, Any]:
    """speech_tokenizer/preprocessor_config.json (EncodecFeatureExtractor, 24 kHz mono)."""
    return copy.deepcopy(_PREPROCESSOR_CONFIG)


def tokenizer_config() -> dict[str, Any]:
    """tokenizer_config.json: a Qwen2Tokenizer over vocab.json + merges.txt."""
    decoder = {
        str(token_id): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for token_id, content, special in ADDED_TOKENS
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for _, c, special in ADDED_TOKENS if special][3:],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        # transformers 5 suspects a Mistral tokenizer in any local checkpoint whose
        # config.json has no transformers_version (ours has none, as published) and
        # warns about its split regex at every load, in every stage process. Qwen2's
        # regex is right as it is: saying so here silences that and changes nothing.
        "fix_mistral_regex": False,
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def config_files(
    size: str, kind: str = DEFAULT_KIND, kv_heads: int | None = None
) -> dict[str, dict[str, Any]]:
    """Every JSON file of the checkpoint, keyed by its path relative to the checkpoint root."""
    return {
        "config.json": model_config(size, kind, kv_heads),
        "generation_config.json": generation_config(size),
        "tokenizer_config.json": tokenizer_config(),
        "speech_tokenizer/config.json": speech_tokenizer_config(size),
        "speech_tokenizer/preprocessor_config.json": preprocessor_config(),
    }
