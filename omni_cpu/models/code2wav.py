"""A streaming decode for vLLM-Omni's Qwen3-TTS code2wav that decodes each frame once.

Written against vllm-omni 0.30.0 (`models/qwen3_tts/tokenizer_12hz/
modeling_qwen3_tts_tokenizer_v2.py`, `Qwen3TTSTokenizerV2Decoder`). In
async-chunk mode vLLM-Omni's decoder keeps a window of earlier codes per request
and, for every chunk, re-runs its transformer over up to 72 retained frames and
its vocoder (the upsampling convolutions, 92 % of the work) over 12 earlier
frames (`_DOWNSTREAM_CONTEXT_FRAME`): a 25-frame chunk decodes 37 frames, +48 %.
A ragged last chunk is zero-padded to the chunk size and decoded whole. The
result is also not the whole-utterance decode: the retained window restarts the
transformer's attention at its first frame.

Every operation in this decoder is causal and either pointwise in time (the
quantizer, SnakeBeta, LayerNorm, the linears), a stride-1 causal convolution, a
transposed convolution, or sliding-window causal attention. So the decode of a
chunk needs only a little of the past, which this module carries per request:

- each causal convolution keeps its last `(kernel - 1) * dilation` input samples
  (zeros before the first chunk, as the stock left padding);
- each transposed convolution keeps its last input sample, whose second half of
  output overlaps the next chunk's first output (its first half was emitted);
- each transformer layer keeps the keys and values (after RoPE) of the last
  `sliding_window - 1` positions, and positions keep counting across chunks.

A chunk of n frames then yields exactly n * 1920 samples, each frame decoded
once, and the concatenated audio is the whole-utterance decode up to float
rounding (tests/models/test_code2wav.py). Against re-decoding, per new frame and for
a ragged last chunk: benchmarks/RESULTS.md, "code2wav streaming decode vs vLLM-Omni's
recompute path". It uses the decoder's own
modules and weights; anything of a type it does not know raises, so a changed
decoder fails loudly instead of decoding wrong. Requests of one step with as
many new frames (the steady chunks of concurrent streams) are decoded as one
batch: their convolutions run once over the stacked tails, each transformer on
its own cache. The trade-off: the state it keeps
is about 5 MB per request on the 0.6B codec in float32 (half in bf16), nearly all
of it the 8 layers' keys and values.

The state lives in the per-request dict vLLM-Omni's `Qwen3TTSCode2Wav` already
keeps (`_decoder_state_cache`) and frees when a request finishes or is aborted
(`on_requests_finished`), so nothing here needs its own cleanup.
`OMNI_CPU_CODE2WAV=recompute` (omni_cpu.envs) keeps vLLM-Omni's path.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

# Key of this module's state in vLLM-Omni's per-request decoder cache dict.
STATE_KEY = "omni_cpu_stream"


def install_streaming_decode(model: Any) -> bool:
    """Decode `model`'s async chunks with `StreamState`; False where that does not apply."""
    decoder = getattr(model, "decoder", None)
    if decoder is None or not hasattr(decoder, "batched_chunked_decode"):
        return False
    if not hasattr(decoder, "pre_transformer") or not hasattr(decoder, "upsample"):
        return False
    stock = decoder.batched_chunked_decode
    decoder.batched_chunked_decode = types.MethodType(
        lambda self, codes, lengths, caches=None, **kwargs: (
            stock(codes, lengths, caches=caches, **kwargs)
            if caches is None
            else streaming_batched_decode(self, codes, lengths, caches)
        ),
        decoder,
    )
    return True


@torch.inference_mode()
def streaming_batched_decode(
    decoder: Any, codes: torch.Tensor, lengths: list[int], caches: list[dict[str, Any]]
) -> list[torch.Tensor]:
    """`batched_chunked_decode(codes, lengths, caches)` (0.30.0): each row's new audio [1, S].

    Row `r` holds `lengths[r]` new frames of one request (zero-padded beyond).
    The first chunk of a voice-clone request starts with `prefix_frames` of
    reference codes, which are decoded (they are the audio's real past) and cut.
    Rows with as many new frames, all first chunks or all later ones, are decoded
    together (`decode_together`): their convolutions run as one batch.
    """
    outputs: list[torch.Tensor | None] = [None] * len(lengths)
    prefixes: dict[int, int] = {}
    groups: dict[tuple[int, bool], list[int]] = {}
    for row, (length, cache) in enumerate(zip(lengths, caches, strict=True)):
        if cache.get("_is_dummy_run", False):  # vLLM's warm-up run: no state to keep
            outputs[row] = decoder._forward_exact(codes[row : row + 1, :, :length])[0]
            continue
        new = cache.get(STATE_KEY) is None
        if new:
            cache[STATE_KEY] = StreamState(decoder)
            prefixes[row] = int(cache.get("prefix_frames", 0) or 0)
        groups.setdefault((length, new), []).append(row)
    for (length, _), rows in groups.items():
        states = [caches[row][STATE_KEY] for row in rows]
        wav = decode_together(states, codes[rows, :, :length])
        for index, row in enumerate(rows):
            outputs[row] = wav[index, :, prefixes.get(row, 0) * states[index].samples_per_frame :]
    return [output for output in outputs if output is not None]


def decode_together(states: list[StreamState], codes: torch.Tensor) -> torch.Tensor:
    """Audio [B, 1, n * samples_per_frame] of B requests' next n frames, codes [B, Q, n].

    The states must be alike: all fresh or all past their first chunk. The
    quantizer, the convolutions and the vocoder (~92 % of the work) run once on
    the batch, over the requests' tails stacked; each request's transformer runs
    on its own keys, values and positions.
    """
    if len(states) == 1:
        return states[0].decode(codes)
    decoder = states[0].decoder
    batch = StreamState(decoder)  # carries the stacked tails while the batch runs
    for key in states[0].tails:
        batch.tails[key] = torch.cat([state.tails[key] for state in states])
    hidden = decoder.quantizer.decode(codes)
    hidden = batch._causal_conv(decoder.pre_conv, hidden).transpose(1, 2)
    hidden = torch.cat(
        [state._transformer(hidden[index : index + 1]) for index, state in enumerate(states)]
    ).permute(0, 2, 1)
    for blocks in decoder.upsample:
        for block in blocks:
            hidden = batch._run(block, hidden)
    for block in decoder.decoder:
        hidden = batch._run(block, hidden)
    for index, state in enumerate(states):
        state.tails = {key: tail[index : index + 1] for key, tail in batch.tails.items()}
        state.position += int(codes.shape[-1])
    return hidden.clamp(min=-1, max=1)


class StreamState:
    """One request's decoder state: what each causal layer needs of the past."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.samples_per_frame = int(decoder.total_upsample)
        self.position = 0  # frames decoded so far = the next frame's RoPE position
        self.window = int(decoder.config.sliding_window)
        self.keys: list[torch.Tensor | None] = [None] * len(decoder.pre_transformer.layers)
        self.values: list[torch.Tensor | None] = [None] * len(decoder.pre_transformer.layers)
        self.tails: dict[int, torch.Tensor] = {}  # id(conv module) -> its last inputs

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Audio [B, 1, n * samples_per_frame] of the next n frames `codes` [B, Q, n]."""
        decoder = self.decoder
        hidden = decoder.quantizer.decode(codes)
        hidden = self._causal_conv(decoder.pre_conv, hidden).transpose(1, 2)
        hidden = self._transformer(hidden).permute(0, 2, 1)
        for blocks in decoder.upsample:
            for block in blocks:
                hidden = self._run(block, hidden)
        for block in decoder.decoder:
            hidden = self._run(block, hidden)
        self.position += int(codes.shape[-1])
        return hidden.clamp(min=-1, max=1)

    # --- convolutions -------------------------------------------------------------

    def _run(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        name = type(module).__name__
        if name == "Qwen3TTSTokenizerV2CausalConvNet":
            return self._causal_conv(module, x)
        if name == "Qwen3TTSTokenizerV2CausalTransConvNet":
            return self._trans_conv(module, x)
        if name == "Qwen3TTSTokenizerV2ConvNeXtBlock":
            return self._convnext(module, x)
        if name == "Qwen3TTSTokenizerV2DecoderDecoderResidualUnit":
            residual = x
            x = self._causal_conv(module.conv1, module.act1(x))
            return self._causal_conv(module.conv2, module.act2(x)) + residual
        if name == "Qwen3TTSTokenizerV2DecoderDecoderBlock":
            for block in module.block:
                x = self._run(block, x)
            return x
        if name == "SnakeBeta":  # pointwise in time
            return module(x)
        raise TypeError(f"streaming code2wav does not know decoder layer {name}")

    def _with_tail(self, module: torch.nn.Module, x: torch.Tensor, keep: int) -> torch.Tensor:
        """`x` after the module's carried last `keep` inputs (zeros at the start); carries anew."""
        if keep == 0:
            return x
        tail = self.tails.get(id(module))
        if tail is None:
            tail = x.new_zeros((*x.shape[:-1], keep))
        full = torch.cat((tail, x), dim=-1)
        self.tails[id(module)] = full[..., -keep:]
        return full

    def _causal_conv(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        if module.stride != 1:
            raise TypeError(f"streaming code2wav needs stride-1 causal convs, got {module.stride}")
        # The stock forward left-pads `padding` zeros and, at stride 1, nothing right.
        return module.conv(self._with_tail(module, x, module.padding)).contiguous()

    def _trans_conv(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        conv = module.conv
        stride, kernel = int(conv.stride[0]), int(conv.kernel_size[0])
        keep = -(-(kernel - stride) // stride)  # inputs whose outputs reach past their stride
        out = _transposed_conv(conv, self._with_tail(module, x, keep))
        # Outputs of the carried inputs' first strides went out with the last chunk;
        # the tail past the new inputs' strides waits for the next chunk's inputs.
        return out[..., keep * stride : (keep + x.shape[-1]) * stride].contiguous()

    def _convnext(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        residual = x
        x = self._causal_conv(module.dwconv, x).permute(0, 2, 1)
        x = module.pwconv2(module.act(module.pwconv1(module.norm(x))))
        return residual + (module.gamma * x).permute(0, 2, 1)

    # --- transformer --------------------------------------------------------------

    def _transformer(self, hidden: torch.Tensor) -> torch.Tensor:
        """The sliding-window transformer on new frames [B, n, C], after the cached past."""
        model = self.decoder.pre_transformer
        hidden = model.input_proj(hidden)
        n = hidden.shape[1]
        positions = torch.arange(self.position, self.position + n).unsqueeze(0)
        cos, sin = model.rotary_emb(hidden, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        past = min(self.position, self.window - 1)
        # Query i (at position start + i) sees keys at positions (q - window, q].
        query = torch.arange(n).unsqueeze(1) + past
        key = torch.arange(past + n).unsqueeze(0)
        mask = (key <= query) & (key > query - self.window)
        for index, layer in enumerate(model.layers):
            hidden = self._layer(index, layer, hidden, cos, sin, mask)
        return model.output_proj(model.norm(hidden))

    def _layer(
        self,
        index: int,
        layer: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        attn = layer.self_attn
        bsz, n, _ = hidden.shape
        x = layer.input_layernorm(hidden)
        shape = (bsz, n, -1, attn.head_dim)
        q = attn.q_norm(attn.q_proj(x).view(shape)).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(x).view(shape)).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if self.keys[index] is not None:
            k = torch.cat((self.keys[index], k), dim=2)
            v = torch.cat((self.values[index], v), dim=2)
        keep = self.window - 1  # what the next chunk's first query can still see
        self.keys[index] = k[:, :, max(0, k.shape[2] - keep) :] if keep else None
        self.values[index] = v[:, :, max(0, v.shape[2] - keep) :] if keep else None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=q.shape[1] != k.shape[1]
        )
        out = attn.o_proj(out.transpose(1, 2).reshape(bsz, n, -1))
        hidden = hidden + layer.self_attn_layer_scale(out)
        x = layer.mlp(layer.post_attention_layernorm(hidden))
        return hidden + layer.mlp_layer_scale(x)


def _transposed_conv(conv: torch.nn.ConvTranspose1d, x: torch.Tensor) -> torch.Tensor:
    """`conv(x)` as one matrix product and an overlap-add, where the kernel spans whole strides.

    In bf16, torch's CPU ConvTranspose1d takes a slow reference path: the 0.6B
    codec's first upsampler (1536 -> 768 channels, kernel 16, stride 8) was about a
    quarter of a 1-frame chunk's decode. As x^T @ W (oneDNN's
    GEMM, [L, C_in] x [C_in, C_out * K]) plus the K / stride shifted sums it is
    a weight read. float32 takes the same path (the same sums in another order).
    """
    weight = conv.weight  # [C_in, C_out, K]
    stride, kernel = int(conv.stride[0]), int(conv.kernel_size[0])
    plain = (
        conv.groups == 1
        and conv.padding == (0,)
        and conv.output_padding == (0,)
        and conv.dilation == (1,)
        and kernel % stride == 0
    )
    if not plain or x.dtype != weight.dtype:
        return conv(x)
    bsz, c_in, length = x.shape
    c_out, spans = weight.shape[1], kernel // stride
    cols = torch.matmul(x.transpose(1, 2), weight.reshape(c_in, c_out * kernel))
    cols = cols.view(bsz, length, c_out, spans, stride).permute(0, 2, 3, 1, 4)
    out = x.new_zeros(bsz, c_out, length + spans - 1, stride)
    for span in range(spans):  # kernel tap span * stride + s lands `span` strides later
        out[:, :, span : span + length] += cols[:, :, span]
    out = out.view(bsz, c_out, -1)
    return out if conv.bias is None else out + conv.bias[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
