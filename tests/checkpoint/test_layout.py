"""The tensor layout and JSON files derived from configs match the published checkpoints."""

from __future__ import annotations

import math
import re

import pytest

from omni_cpu.checkpoint import configs
from omni_cpu.checkpoint.layout import (
    MODEL_FILE,
    SPEECH_TOKENIZER_FILE,
    file_layouts,
    tensor_layout,
)
from omni_cpu.checkpoint.writer import plan_checkpoint


def _layouts(size: str) -> dict:
    return file_layouts(configs.model_config(size), configs.speech_tokenizer_config(size))


def _as_tuples(layout: dict) -> dict:
    return {name: (spec.shape, spec.dtype) for name, spec in layout.items()}


def _patterns(names) -> set[str]:
    return {re.sub(r"\.\d+\.", ".{i}.", name) for name in names}


@pytest.mark.parametrize("file", [MODEL_FILE, SPEECH_TOKENIZER_FILE])
def test_0_6b_tensors_equal_the_published_names_shapes_and_dtypes(file, reference_weights):
    assert _as_tuples(_layouts("0.6b")[file]) == reference_weights[file]


def test_0_6b_tensors_come_in_the_published_state_dict_order(reference_weights):
    for file, layout in _layouts("0.6b").items():
        assert list(layout) == list(reference_weights[file])


@pytest.mark.parametrize(
    "file",
    [
        "config.json",
        "generation_config.json",
        "speech_tokenizer/config.json",
        "speech_tokenizer/preprocessor_config.json",
    ],
)
def test_0_6b_json_files_equal_the_published_values(file, reference):
    assert configs.config_files("0.6b")[file] == reference["files"][file]


def test_0_6b_parameter_counts_match_the_published_totals():
    layouts = _layouts("0.6b")
    counts = {f: sum(math.prod(s.shape) for s in layout.values()) for f, layout in layouts.items()}
    assert counts == {MODEL_FILE: 905_788_672, SPEECH_TOKENIZER_FILE: 170_557_441}


def test_1_7b_files_have_the_published_byte_sizes():
    """Sizes from the Hub listing of Qwen3-TTS-12Hz-1.7B-CustomVoice: header and data exact."""
    assert plan_checkpoint("1.7b").file_bytes == {
        MODEL_FILE: 3_833_402_552,
        SPEECH_TOKENIZER_FILE: 682_293_092,
    }


def test_1_7b_projects_the_talker_width_down_to_the_code_predictor():
    layout = _layouts("1.7b")[MODEL_FILE]
    assert layout["talker.code_predictor.small_to_mtp_projection.weight"].shape == (1024, 2048)
    assert layout["talker.code_predictor.small_to_mtp_projection.bias"].shape == (1024,)
    assert layout["talker.code_predictor.model.codec_embedding.0.weight"].shape == (2048, 2048)
    assert layout["talker.code_predictor.lm_head.0.weight"].shape == (2048, 1024)


def test_1_7b_differs_from_0_6b_only_in_talker_width_and_projection(reference):
    small, large = configs.model_config("0.6b"), configs.model_config("1.7b")
    assert large["tts_model_size"] == "1b7"
    talker = {k: v for k, v in large["talker_config"].items() if small["talker_config"][k] != v}
    assert talker == {"hidden_size": 2048, "intermediate_size": 6144}
    assert (
        configs.speech_tokenizer_config("1.7b")
        == reference["files"]["speech_tokenizer/config.json"]
    )


@pytest.mark.parametrize("file", [MODEL_FILE, SPEECH_TOKENIZER_FILE])
def test_tiny_uses_only_real_tensor_names_and_every_kind_of_them(file, reference_weights):
    tiny = set(_layouts("tiny")[file])
    assert tiny <= set(reference_weights[file])
    assert _patterns(tiny) == _patterns(reference_weights[file])


def test_tiny_keeps_every_config_key():
    def keys(value, prefix=""):
        if not isinstance(value, dict):
            return set()
        return {prefix + k for k in value} | {
            key for k, v in value.items() for key in keys(v, f"{prefix}{k}.")
        }

    for make in (configs.model_config, configs.speech_tokenizer_config):
        assert keys(make("tiny")) == keys(make("0.6b"))


def test_tiny_ids_fit_its_vocabularies():
    config = configs.model_config("tiny")
    talker = config["talker_config"]
    codec_ids = [
        *talker["spk_id"].values(),
        *talker["codec_language_id"].values(),
        *(v for k, v in talker.items() if k.startswith("codec_") and isinstance(v, int)),
    ]
    assert max(codec_ids) < talker["vocab_size"]
    assert max(token_id for token_id, _, _ in configs.ADDED_TOKENS) < talker["text_vocab_size"]
    assert config["assistant_token_id"] < talker["text_vocab_size"]


def test_tiny_keeps_the_real_frame_geometry():
    codec = configs.speech_tokenizer_config("tiny")
    decoder = codec["decoder_config"]
    assert math.prod(decoder["upsample_rates"] + decoder["upsampling_ratios"]) == 1920
    assert codec["decode_upsample_rate"] == 1920
    assert (
        decoder["num_quantizers"]
        == configs.model_config("tiny")["talker_config"]["num_code_groups"]
        == 16
    )
    assert codec["output_sample_rate"] == 24000


def test_tiny_attention_heads_are_wide_enough_for_vllm_cpu_attention():
    talker = configs.model_config("tiny")["talker_config"]
    for cfg in (talker, talker["code_predictor_config"]):
        assert cfg["head_dim"] >= 32
    # M-RoPE sections cover half the head, as [24, 20, 20] does for head_dim 128.
    assert sum(talker["rope_scaling"]["mrope_section"]) == talker["head_dim"] // 2


def test_tensor_layout_holds_both_files_tensors():
    layouts = _layouts("tiny")
    merged = tensor_layout(configs.model_config("tiny"), configs.speech_tokenizer_config("tiny"))
    assert len(merged) == sum(len(layout) for layout in layouts.values())


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="unknown checkpoint size"):
        configs.model_config("3b")
