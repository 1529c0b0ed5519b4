"""Every tensor of a Qwen3-TTS checkpoint (name, shape, dtype), derived from its configs.

The rules mirror the module constructors of qwen-tts 0.1.1 / vLLM-Omni 0.30.0
(`Qwen3TTSForConditionalGeneration`, `Qwen3TTSSpeakerEncoder`,
`Qwen3TTSTokenizerV2Decoder`) and transformers' `MimiModel` (the speech tokenizer's
encoder); for the 0.6B CustomVoice configs they give exactly the tensors of the
published checkpoint (every name, shape and dtype; tests/checkpoint checks them against
a copy of its layout), and for every kind and size the names and shapes the official
classes have (tests/checkpoint/official-names.json, made by
scripts/official_checkpoint_names.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

MODEL_FILE = "model.safetensors"
SPEECH_TOKENIZER_FILE = "speech_tokenizer/model.safetensors"


class TensorSpec(NamedTuple):
    """One tensor: its shape and dtype name ("bfloat16" or "float32")."""

    shape: tuple[int, ...]
    dtype: str


Layout = dict[str, TensorSpec]


def _decoder_layer(
    out: Layout, prefix: str, cfg: dict[str, Any], dtype: str, head_norms: bool = True
) -> None:
    """A Qwen3 decoder layer: GQA attention with per-head q/k RMSNorm (`head_norms`), SwiGLU
    MLP, no biases; in the official state dict's order."""
    hidden, inner = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg["head_dim"]
    q_width = cfg["num_attention_heads"] * head_dim
    kv_width = cfg["num_key_value_heads"] * head_dim
    out[f"{prefix}.self_attn.q_proj.weight"] = TensorSpec((q_width, hidden), dtype)
    out[f"{prefix}.self_attn.k_proj.weight"] = TensorSpec((kv_width, hidden), dtype)
    out[f"{prefix}.self_attn.v_proj.weight"] = TensorSpec((kv_width, hidden), dtype)
    out[f"{prefix}.self_attn.o_proj.weight"] = TensorSpec((hidden, q_width), dtype)
    if head_norms:
        out[f"{prefix}.self_attn.q_norm.weight"] = TensorSpec((head_dim,), dtype)
        out[f"{prefix}.self_attn.k_norm.weight"] = TensorSpec((head_dim,), dtype)
    out[f"{prefix}.mlp.gate_proj.weight"] = TensorSpec((inner, hidden), dtype)
    out[f"{prefix}.mlp.up_proj.weight"] = TensorSpec((inner, hidden), dtype)
    out[f"{prefix}.mlp.down_proj.weight"] = TensorSpec((hidden, inner), dtype)
    out[f"{prefix}.input_layernorm.weight"] = TensorSpec((hidden,), dtype)
    out[f"{prefix}.post_attention_layernorm.weight"] = TensorSpec((hidden,), dtype)


# Qwen3TTSSpeakerEncoderConfig's defaults: config.json gives only enc_dim and sample_rate.
SPEAKER_ENCODER_DEFAULTS: dict[str, Any] = {
    "mel_dim": 128,
    "enc_channels": [512, 512, 512, 512, 1536],
    "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_attention_channels": 128,
    "enc_res2net_scale": 8,
    "enc_se_channels": 128,
}


def has_speaker_encoder(config: dict[str, Any]) -> bool:
    """Only Base checkpoints carry speaker-encoder weights (the x-vector of the reference)."""
    return config.get("tts_model_type") == "base"


def _speaker_encoder(out: Layout, enc: dict[str, Any], dtype: str) -> None:
    """Qwen3TTSSpeakerEncoder (ECAPA-TDNN): TDNN, SE-Res2Net blocks, MFA, pooling, fc."""
    cfg = {**SPEAKER_ENCODER_DEFAULTS, **enc}
    channels, kernels = cfg["enc_channels"], cfg["enc_kernel_sizes"]
    p = "speaker_encoder"

    def conv(name: str, c_out: int, c_in: int, kernel: int) -> None:
        out[f"{name}.weight"] = TensorSpec((c_out, c_in, kernel), dtype)
        out[f"{name}.bias"] = TensorSpec((c_out,), dtype)

    conv(f"{p}.blocks.0.conv", channels[0], cfg["mel_dim"], kernels[0])
    scale = cfg["enc_res2net_scale"]
    for i in range(1, len(channels) - 1):
        block, width = f"{p}.blocks.{i}", channels[i]
        conv(f"{block}.tdnn1.conv", width, channels[i - 1], 1)
        for j in range(scale - 1):
            conv(
                f"{block}.res2net_block.blocks.{j}.conv", width // scale, width // scale, kernels[i]
            )
        conv(f"{block}.tdnn2.conv", width, width, 1)
        conv(f"{block}.se_block.conv1", cfg["enc_se_channels"], width, 1)
        conv(f"{block}.se_block.conv2", width, cfg["enc_se_channels"], 1)
    last = channels[-1]
    conv(f"{p}.mfa.conv", last, last, kernels[-1])
    conv(f"{p}.asp.tdnn.conv", cfg["enc_attention_channels"], last * 3, 1)
    conv(f"{p}.asp.conv", last, cfg["enc_attention_channels"], 1)
    conv(f"{p}.fc", cfg["enc_dim"], last * 2, 1)


def model_layout(config: dict[str, Any]) -> Layout:
    """model.safetensors: talker + code predictor (+ speaker encoder for Base), all bf16.

    CustomVoice and VoiceDesign ship no speaker encoder; `small_to_mtp_projection`
    exists only when the talker is wider than the code predictor (1.7B).
    """
    dtype = "bfloat16"
    talker = config["talker_config"]
    predictor = talker["code_predictor_config"]
    hidden = talker["hidden_size"]
    text_hidden = talker["text_hidden_size"]
    out: Layout = {}
    for i in range(talker["num_hidden_layers"]):
        _decoder_layer(out, f"talker.model.layers.{i}", talker, dtype)
    out["talker.model.norm.weight"] = TensorSpec((hidden,), dtype)
    out["talker.model.codec_embedding.weight"] = TensorSpec((talker["vocab_size"], hidden), dtype)
    out["talker.model.text_embedding.weight"] = TensorSpec(
        (talker["text_vocab_size"], text_hidden), dtype
    )
    out["talker.text_projection.linear_fc1.weight"] = TensorSpec((text_hidden, text_hidden), dtype)
    out["talker.text_projection.linear_fc1.bias"] = TensorSpec((text_hidden,), dtype)
    out["talker.text_projection.linear_fc2.weight"] = TensorSpec((hidden, text_hidden), dtype)
    out["talker.text_projection.linear_fc2.bias"] = TensorSpec((hidden,), dtype)
    out["talker.codec_head.weight"] = TensorSpec((talker["vocab_size"], hidden), dtype)

    cp_hidden = predictor["hidden_size"]
    for i in range(predictor["num_hidden_layers"]):
        _decoder_layer(out, f"talker.code_predictor.model.layers.{i}", predictor, dtype)
    out["talker.code_predictor.model.norm.weight"] = TensorSpec((cp_hidden,), dtype)
    groups = talker["num_code_groups"] - 1
    # The residual-codebook embeddings stay in the talker width: their sum is the
    # talker's next input; only the predictor's own input is projected down.
    for i in range(groups):
        out[f"talker.code_predictor.model.codec_embedding.{i}.weight"] = TensorSpec(
            (predictor["vocab_size"], hidden), dtype
        )
    for i in range(groups):
        out[f"talker.code_predictor.lm_head.{i}.weight"] = TensorSpec(
            (predictor["vocab_size"], cp_hidden), dtype
        )
    if cp_hidden != hidden:
        out["talker.code_predictor.small_to_mtp_projection.weight"] = TensorSpec(
            (cp_hidden, hidden), dtype
        )
        out["talker.code_predictor.small_to_mtp_projection.bias"] = TensorSpec((cp_hidden,), dtype)
    if has_speaker_encoder(config):
        _speaker_encoder(out, config["speaker_encoder_config"], dtype)
    return out


def _mimi_encoder(out: Layout, enc: dict[str, Any], dtype: str) -> None:
    """transformers' MimiModel minus its decoder parts (Qwen3TTSTokenizerV2Encoder)."""
    p = "encoder"

    def conv(name: str, c_out: int, c_in: int, kernel: int, bias: bool = True) -> None:
        out[f"{name}.conv.weight"] = TensorSpec((c_out, c_in, kernel), dtype)
        if bias:
            out[f"{name}.conv.bias"] = TensorSpec((c_out,), dtype)

    # SEANet: conv, then per ratio (reversed) resnet blocks + ELU + strided conv.
    index = 0
    conv(
        f"{p}.encoder.layers.{index}", enc["num_filters"], enc["audio_channels"], enc["kernel_size"]
    )
    index += 1
    scale = 1
    for ratio in reversed(enc["upsampling_ratios"]):
        dim = scale * enc["num_filters"]
        for _ in range(enc["num_residual_layers"]):
            hidden = dim // enc["compress"]
            conv(f"{p}.encoder.layers.{index}.block.1", hidden, dim, enc["residual_kernel_size"])
            conv(f"{p}.encoder.layers.{index}.block.3", dim, hidden, 1)
            index += 1
        index += 1  # ELU
        conv(f"{p}.encoder.layers.{index}", dim * 2, dim, ratio * 2)
        index += 1
        scale *= 2
    index += 1  # ELU
    conv(
        f"{p}.encoder.layers.{index}",
        enc["hidden_size"],
        scale * enc["num_filters"],
        enc["last_kernel_size"],
    )

    width = enc["hidden_size"]
    q_width = enc["num_attention_heads"] * enc["head_dim"]
    kv_width = enc["num_key_value_heads"] * enc["head_dim"]
    for i in range(enc["num_hidden_layers"]):
        layer = f"{p}.encoder_transformer.layers.{i}"
        out[f"{layer}.self_attn.q_proj.weight"] = TensorSpec((q_width, width), dtype)
        out[f"{layer}.self_attn.k_proj.weight"] = TensorSpec((kv_width, width), dtype)
        out[f"{layer}.self_attn.v_proj.weight"] = TensorSpec((kv_width, width), dtype)
        out[f"{layer}.self_attn.o_proj.weight"] = TensorSpec((width, q_width), dtype)
        out[f"{layer}.mlp.fc1.weight"] = TensorSpec((enc["intermediate_size"], width), dtype)
        out[f"{layer}.mlp.fc2.weight"] = TensorSpec((width, enc["intermediate_size"]), dtype)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out[f"{layer}.{norm}.weight"] = TensorSpec((width,), dtype)
            out[f"{layer}.{norm}.bias"] = TensorSpec((width,), dtype)
        out[f"{layer}.self_attn_layer_scale.scale"] = TensorSpec((width,), dtype)
        out[f"{layer}.mlp_layer_scale.scale"] = TensorSpec((width,), dtype)

    # 25 Hz SEANet output to 12.5 Hz frames: kernel 2 * (25 / 12.5), stride 2, no bias.
    encodec_rate = enc["sampling_rate"] / _product(enc["upsampling_ratios"])
    conv(f"{p}.downsample", width, width, 2 * int(encodec_rate / enc["frame_rate"]), bias=False)

    semantic = enc["num_semantic_quantizers"]
    vq_width = enc["vector_quantization_hidden_dimension"]
    for kind, count in (
        ("semantic", semantic),
        ("acoustic", enc["num_quantizers"] - semantic),
    ):
        rvq = f"{p}.quantizer.{kind}_residual_vector_quantizer"
        for i in range(count):
            book = f"{rvq}.layers.{i}.codebook"
            out[f"{book}.initialized"] = TensorSpec((1,), dtype)
            out[f"{book}.cluster_usage"] = TensorSpec((enc["codebook_size"],), dtype)
            out[f"{book}.embed_sum"] = TensorSpec(
                (enc["codebook_size"], enc["codebook_dim"]), dtype
            )
        if vq_width != width:
            out[f"{rvq}.input_proj.weight"] = TensorSpec((vq_width, width, 1), dtype)
            out[f"{rvq}.output_proj.weight"] = TensorSpec((width, vq_width, 1), dtype)


def _codec_decoder(out: Layout, dec: dict[str, Any], dtype: str) -> None:
    """Qwen3TTSTokenizerV2Decoder: split RVQ, pre-conv, transformer, upsampling, SEANet."""
    p = "decoder"
    width = dec["hidden_size"]
    for i in range(dec["num_hidden_layers"]):
        layer = f"{p}.pre_transformer.layers.{i}"
        # Qwen3's layer without the q/k norms, each half scaled on its way into the residual.
        _decoder_layer(out, layer, dec, dtype, head_norms=False)
        out[f"{layer}.self_attn_layer_scale.scale"] = TensorSpec((width,), dtype)
        out[f"{layer}.mlp_layer_scale.scale"] = TensorSpec((width,), dtype)
    latent = dec["latent_dim"]
    out[f"{p}.pre_transformer.norm.weight"] = TensorSpec((width,), dtype)
    out[f"{p}.pre_transformer.input_proj.weight"] = TensorSpec((width, latent), dtype)
    out[f"{p}.pre_transformer.input_proj.bias"] = TensorSpec((width,), dtype)
    out[f"{p}.pre_transformer.output_proj.weight"] = TensorSpec((latent, width), dtype)
    out[f"{p}.pre_transformer.output_proj.bias"] = TensorSpec((latent,), dtype)

    # Both halves of the split RVQ project codebook_dim <-> codebook_dim / 2.
    book_dim = dec["codebook_dim"]
    vq_dim = book_dim // 2
    semantic = dec.get("num_semantic_quantizers", 1)
    for half, count in (("rvq_first", semantic), ("rvq_rest", dec["num_quantizers"] - semantic)):
        rvq = f"{p}.quantizer.{half}"
        out[f"{rvq}.input_proj.weight"] = TensorSpec((vq_dim, book_dim, 1), dtype)
        out[f"{rvq}.output_proj.weight"] = TensorSpec((book_dim, vq_dim, 1), dtype)
        for i in range(count):
            book = f"{rvq}.vq.layers.{i}._codebook"
            out[f"{book}.cluster_usage"] = TensorSpec((dec["codebook_size"],), dtype)
            out[f"{book}.embedding_sum"] = TensorSpec((dec["codebook_size"], vq_dim), dtype)

    out[f"{p}.pre_conv.conv.weight"] = TensorSpec((latent, book_dim, 3), dtype)
    out[f"{p}.pre_conv.conv.bias"] = TensorSpec((latent,), dtype)
    for i, factor in enumerate(dec["upsampling_ratios"]):
        up = f"{p}.upsample.{i}"
        out[f"{up}.0.conv.weight"] = TensorSpec((latent, latent, factor), dtype)
        out[f"{up}.0.conv.bias"] = TensorSpec((latent,), dtype)
        out[f"{up}.1.gamma"] = TensorSpec((latent,), dtype)
        out[f"{up}.1.dwconv.conv.weight"] = TensorSpec((latent, 1, 7), dtype)
        out[f"{up}.1.dwconv.conv.bias"] = TensorSpec((latent,), dtype)
        out[f"{up}.1.norm.weight"] = TensorSpec((latent,), dtype)
        out[f"{up}.1.norm.bias"] = TensorSpec((latent,), dtype)
        out[f"{up}.1.pwconv1.weight"] = TensorSpec((4 * latent, latent), dtype)
        out[f"{up}.1.pwconv1.bias"] = TensorSpec((4 * latent,), dtype)
        out[f"{up}.1.pwconv2.weight"] = TensorSpec((latent, 4 * latent), dtype)
        out[f"{up}.1.pwconv2.bias"] = TensorSpec((latent,), dtype)

    top = dec["decoder_dim"]
    out[f"{p}.decoder.0.conv.weight"] = TensorSpec((top, latent, 7), dtype)
    out[f"{p}.decoder.0.conv.bias"] = TensorSpec((top,), dtype)
    rates = dec["upsample_rates"]
    for i, rate in enumerate(rates):
        block = f"{p}.decoder.{i + 1}.block"
        c_in, c_out = top // 2**i, top // 2 ** (i + 1)
        out[f"{block}.0.alpha"] = TensorSpec((c_in,), dtype)
        out[f"{block}.0.beta"] = TensorSpec((c_in,), dtype)
        # ConvTranspose1d weights are [in, out, kernel].
        out[f"{block}.1.conv.weight"] = TensorSpec((c_in, c_out, 2 * rate), dtype)
        out[f"{block}.1.conv.bias"] = TensorSpec((c_out,), dtype)
        for unit in (2, 3, 4):  # residual units, dilations 1, 3, 9
            res = f"{block}.{unit}"
            out[f"{res}.act1.alpha"] = TensorSpec((c_out,), dtype)
            out[f"{res}.act1.beta"] = TensorSpec((c_out,), dtype)
            out[f"{res}.conv1.conv.weight"] = TensorSpec((c_out, c_out, 7), dtype)
            out[f"{res}.conv1.conv.bias"] = TensorSpec((c_out,), dtype)
            out[f"{res}.act2.alpha"] = TensorSpec((c_out,), dtype)
            out[f"{res}.act2.beta"] = TensorSpec((c_out,), dtype)
            out[f"{res}.conv2.conv.weight"] = TensorSpec((c_out, c_out, 1), dtype)
            out[f"{res}.conv2.conv.bias"] = TensorSpec((c_out,), dtype)
    last = top // 2 ** len(rates)
    tail = len(rates) + 1
    out[f"{p}.decoder.{tail}.alpha"] = TensorSpec((last,), dtype)
    out[f"{p}.decoder.{tail}.beta"] = TensorSpec((last,), dtype)
    out[f"{p}.decoder.{tail + 1}.conv.weight"] = TensorSpec((1, last, 7), dtype)
    out[f"{p}.decoder.{tail + 1}.conv.bias"] = TensorSpec((1,), dtype)


def speech_tokenizer_layout(st_config: dict[str, Any]) -> Layout:
    """speech_tokenizer/model.safetensors: Mimi encoder + codec decoder, all fp32."""
    out: Layout = {}
    _mimi_encoder(out, st_config["encoder_config"], "float32")
    _codec_decoder(out, st_config["decoder_config"], "float32")
    return out


def file_layouts(config: dict[str, Any], st_config: dict[str, Any]) -> dict[str, Layout]:
    """Each safetensors file of the checkpoint with its tensors, keyed by relative path."""
    return {
        MODEL_FILE: model_layout(config),
        SPEECH_TOKENIZER_FILE: speech_tokenizer_layout(st_config),
    }


def tensor_layout(config: dict[str, Any], st_config: dict[str, Any]) -> Layout:
    """Every tensor of the checkpoint, both files together (their names never collide)."""
    return {**model_layout(config), **speech_tokenizer_layout(st_config)}


def numel(spec: TensorSpec) -> int:
    """Number of elements of one tensor."""
    return _product(spec.shape)


def _product(values: list[int] | tuple[int, ...]) -> int:
    result = 1
    for value in values:
        result *= value
    return result
