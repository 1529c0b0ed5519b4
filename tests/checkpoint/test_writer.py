"""A written tiny checkpoint: the real files, readable headers, sane random values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from omni_cpu.checkpoint import configs, safetensors_file
from omni_cpu.checkpoint.layout import MODEL_FILE, SPEECH_TOKENIZER_FILE, file_layouts
from omni_cpu.checkpoint.writer import CHECKPOINT_FILES, CheckpointDirError, make_checkpoint


def test_every_file_of_the_hub_checkpoint_is_written(tiny_checkpoint):
    written = {
        str(p.relative_to(tiny_checkpoint)) for p in tiny_checkpoint.rglob("*") if p.is_file()
    }
    assert written == set(CHECKPOINT_FILES)


def test_json_files_hold_the_tiny_configs(tiny_checkpoint):
    for name, content in configs.config_files("tiny").items():
        assert json.loads((tiny_checkpoint / name).read_text()) == content


@pytest.mark.parametrize("file", [MODEL_FILE, SPEECH_TOKENIZER_FILE])
def test_safetensors_headers_list_exactly_the_layout(tiny_checkpoint, file):
    expected = file_layouts(configs.model_config("tiny"), configs.speech_tokenizer_config("tiny"))[
        file
    ]
    assert safetensors_file.read_layout(tiny_checkpoint / file) == expected


def test_model_is_bf16_and_speech_tokenizer_fp32(tiny_checkpoint):
    model = safetensors_file.read_layout(tiny_checkpoint / MODEL_FILE)
    codec = safetensors_file.read_layout(tiny_checkpoint / SPEECH_TOKENIZER_FILE)
    assert {spec.dtype for spec in model.values()} == {"bfloat16"}
    assert {spec.dtype for spec in codec.values()} == {"float32"}


def test_file_sizes_match_header_offsets(tiny_checkpoint):
    for file in (MODEL_FILE, SPEECH_TOKENIZER_FILE):
        path = tiny_checkpoint / file
        header = safetensors_file.read_header(path)
        end = max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__")
        length = int.from_bytes(path.read_bytes()[:8], "little")
        assert path.stat().st_size == 8 + length + end


def test_decoder_codebooks_are_finite_nonzero_and_usage_positive(tiny_checkpoint):
    tensors = dict(safetensors_file.iter_tensors(tiny_checkpoint / SPEECH_TOKENIZER_FILE))
    books = [n[: -len(".embedding_sum")] for n in tensors if n.endswith(".embedding_sum")]
    assert len(books) == 16
    for book in books:
        usage = tensors[f"{book}.cluster_usage"]
        effective = tensors[f"{book}.embedding_sum"] / usage[:, None]
        assert (usage > 0).all()
        assert np.isfinite(effective).all()
        assert (np.abs(effective).sum(axis=1) > 0).all()


def test_weights_are_random_norms_one_and_biases_zero(tiny_checkpoint):
    tensors = dict(safetensors_file.iter_tensors(tiny_checkpoint / MODEL_FILE))
    q_proj = tensors["talker.model.layers.0.self_attn.q_proj.weight"]
    assert 0.015 < float(q_proj.std()) < 0.025
    assert (tensors["talker.model.norm.weight"] == 1.0).all()
    assert (tensors["talker.text_projection.linear_fc1.bias"] == 0.0).all()
    assert all(np.isfinite(t).all() for t in tensors.values())


def test_same_seed_writes_the_same_bytes_and_another_seed_does_not(tiny_checkpoint, tmp_path):
    again = make_checkpoint("tiny", tmp_path / "again", seed=0)
    other = make_checkpoint("tiny", tmp_path / "other", seed=1)
    original = (tiny_checkpoint / MODEL_FILE).read_bytes()
    assert (again / MODEL_FILE).read_bytes() == original
    assert (other / MODEL_FILE).read_bytes() != original


def test_no_partial_files_are_left(tiny_checkpoint):
    assert not list(tiny_checkpoint.rglob("*.partial"))


def test_non_empty_directory_is_refused_without_force(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointDirError, match="not empty"):
        make_checkpoint("tiny", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_bfloat16_conversion_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 1.00390625, 1.01171875, 3.4e38], dtype=np.float32)
    bits = safetensors_file.to_bfloat16_bits(values)
    # 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: even (1.0) wins; 1 + 3*2^-8 rounds up.
    assert bits.tolist() == [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x7F80]


def test_a_tiny_checkpoint_may_have_the_published_models_8_kv_heads(tiny_kinds_8kv):
    config = json.loads((tiny_kinds_8kv["custom-voice"] / "config.json").read_text())
    for part in (config["talker_config"], config["talker_config"]["code_predictor_config"]):
        assert (part["num_key_value_heads"], part["num_attention_heads"]) == (8, 16)
    layout = safetensors_file.read_layout(tiny_kinds_8kv["custom-voice"] / MODEL_FILE)
    assert layout["talker.model.layers.0.self_attn.k_proj.weight"].shape == (8 * 64, 128)


def test_only_a_tiny_checkpoint_takes_a_kv_head_count():
    with pytest.raises(ValueError, match="only a tiny checkpoint"):
        configs.model_config("0.6b", kv_heads=8)
