"""Weights one audio frame streams at batch 1, from the config's layout."""

from __future__ import annotations

from omni_cpu.plan.footprint import footprint_for_model


def test_0_6b_streams_the_talker_once_and_the_code_predictor_fifteen_times() -> None:
    fp = footprint_for_model("0.6b")
    # Talker: 28 Qwen3 layers (1024 wide, 2048 q, 1024 kv, 3072 MLP) + codec head 3072x1024.
    layer = 1024 * (2048 + 1024 + 1024) + 2048 * 1024 + 3 * 3072 * 1024
    talker = 28 * layer + 3072 * 1024
    # Predictor: 5 such layers + one 2048x1024 head, no projection (same width), 15 times.
    predictor = 5 * layer + 2048 * 1024
    assert fp.streamed_params_per_frame == talker + 15 * predictor
    assert fp.streamed_bytes_per_frame("int8") * 4 == fp.streamed_bytes_per_frame("float32")
    # int4: 4 bits and a bf16 scale and minimum per 32 weights.
    four_bit = fp.streamed_bytes_per_frame("bfloat16", "int4")
    assert four_bit == int(fp.streamed_params_per_frame * 0.625)
    assert fp.talker_weight_bytes("bfloat16", "int4") < fp.talker_weight_bytes("bfloat16", "int8")


def test_1_7b_counts_the_projection_into_the_narrower_predictor() -> None:
    wide, narrow = footprint_for_model("1.7b"), footprint_for_model("0.6b")
    assert wide.streamed_params_per_frame > narrow.streamed_params_per_frame
