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

How it runs on a CPU core (benchmarks/RESULTS.md, "code2wav's decoder after the one-pass
SnakeBeta, ..."): the
vocoder's activations stay time-major ([B, L, C], oneDNN's channels-last layout), so no
convolution converts its input or output; each convolution's weights are packed for oneDNN
once per input shape instead of reordered on every call; a transposed convolution whose
kernel spans whole strides is one stride-1 convolution into stride x C_out channels; and
SnakeBeta is one pass (csrc/snake.cpp) that writes after the next convolution's tail.

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
    # The SnakeBeta kernel's module, loaded as the stage starts, not in its first request.
    from omni_cpu.kernels import gemv

    gemv.kernel() or gemv.avx2_kernel()
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
    hidden = batch._causal_conv(decoder.pre_conv, _quantized(decoder, codes))
    hidden = torch.cat(
        [state._transformer(hidden[index : index + 1]) for index, state in enumerate(states)]
    )
    audio = batch._vocoder(hidden)
    for index, state in enumerate(states):
        state.tails = {key: tail[index : index + 1] for key, tail in batch.tails.items()}
        state.position += int(codes.shape[-1])
    return audio


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
        hidden = self._causal_conv(self.decoder.pre_conv, _quantized(self.decoder, codes))
        audio = self._vocoder(self._transformer(hidden))
        self.position += int(codes.shape[-1])
        return audio

    def _vocoder(self, hidden: torch.Tensor) -> torch.Tensor:
        """Audio [B, 1, L] of the transformer's output [B, n, C], through the upsamplers and
        the decoder blocks, time-major throughout."""
        for blocks in self.decoder.upsample:
            for block in blocks:
                hidden = self._run(block, hidden)
        for block in self.decoder.decoder:
            hidden = self._run(block, hidden)
        bsz, length, channels = hidden.shape
        return hidden.reshape(bsz, length * channels, 1).transpose(1, 2).clamp(min=-1, max=1)

    # --- convolutions, on time-major activations [B, L, C] --------------------------

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
            x = self._snake_conv(module.act1, module.conv1, x)
            return self._snake_conv(module.act2, module.conv2, x) + residual
        if name == "Qwen3TTSTokenizerV2DecoderDecoderBlock":
            for block in module.block:
                x = self._run(block, x)
            return x
        if name == "SnakeBeta":  # pointwise in time
            return _snake(module, x, None)
        raise TypeError(f"streaming code2wav does not know decoder layer {name}")

    def _snake_conv(self, act: Any, module: Any, x: torch.Tensor) -> torch.Tensor:
        """`module(act(x))` for a SnakeBeta then a causal convolution: the activation written
        after the convolution's carried inputs in one pass where the kernel runs."""
        if module.stride != 1:
            raise TypeError(f"streaming code2wav needs stride-1 causal convs, got {module.stride}")
        keep = module.padding
        tail = self.tails.get(id(module)) if keep else None
        if keep and tail is None:
            tail = x.new_zeros((x.shape[0], keep, x.shape[2]))
        full = _snake(act, x, tail)
        if keep:
            self.tails[id(module)] = full[:, -keep:].clone()
        return _conv(module.conv, full)

    def _with_tail(self, module: torch.nn.Module, x: torch.Tensor, keep: int) -> torch.Tensor:
        """`x` after the module's carried last `keep` inputs (zeros at the start); carries anew."""
        if keep == 0:
            return x
        tail = self.tails.get(id(module))
        if tail is None:
            tail = x.new_zeros((x.shape[0], keep, x.shape[2]))
        full = torch.cat((tail, x), dim=1)
        self.tails[id(module)] = full[:, -keep:].clone()  # not a view pinning `full`
        return full

    def _causal_conv(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        if module.stride != 1:
            raise TypeError(f"streaming code2wav needs stride-1 causal convs, got {module.stride}")
        # The stock forward left-pads `padding` zeros and, at stride 1, nothing right.
        return _conv(module.conv, self._with_tail(module, x, module.padding))

    def _trans_conv(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        conv = module.conv
        stride, kernel = int(conv.stride[0]), int(conv.kernel_size[0])
        keep = -(-(kernel - stride) // stride)  # inputs whose outputs reach past their stride
        full = self._with_tail(module, x, keep)
        if kernel % stride == 0 and keep == kernel // stride - 1 and conv.groups == 1:
            # Only the new inputs' strides: a stride-1 convolution over [tail | x].
            return _strided_outputs(conv, full)
        out = _transposed_conv(conv, full.transpose(1, 2))
        # Outputs of the carried inputs' first strides went out with the last chunk;
        # the tail past the new inputs' strides waits for the next chunk's inputs.
        return out[..., keep * stride : (keep + x.shape[1]) * stride].transpose(1, 2).contiguous()

    def _convnext(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        residual = x
        x = self._causal_conv(module.dwconv, x)
        x = module.pwconv2(module.act(module.pwconv1(module.norm(x))))
        return residual + module.gamma * x

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


# A convolution's weights are reordered for oneDNN on every call unless packed in advance,
# and a layout packed for one input length can be many times slower for another, so a
# packed layout is kept per input shape: for the PACKED_SHAPES shapes of the most calls
# among the last SHAPES_COUNTED (a stream's steady chunk and the ramp's commonest sizes).
# Each costs a copy of the packed weights; plan/costs.py's CODE2WAV_PACKED_COPIES counts
# them in the stage's memory. Reordering unpacked reads and writes the weights on every
# call, which the talker's weight streaming on the next core slows most. Only convolutions
# of at least PACKED_MIN_WEIGHTS weights are packed: the codec's first upsampler and the
# convolutions around it, whose reorder is most of a call at a chunk's few frames; the
# long, narrow later ones cost their arithmetic either way.
PACKED_SHAPES = 3
SHAPES_COUNTED = 32
PACKED_MIN_WEIGHTS = 1 << 20
_UNPACKED = object()


def _quantized(decoder: Any, codes: torch.Tensor) -> torch.Tensor:
    """The quantizer's embedding of codes [B, Q, n], time-major [B, n, C]."""
    return decoder.quantizer.decode(codes).transpose(1, 2).contiguous()


def _conv(conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """`conv` on time-major x [B, L, C_in]: [B, L', C_out], on weights packed once per input
    shape where oneDNN runs (stride 1, no padding, no groups: the codec's convolutions but
    the ConvNeXt's depthwise one, which runs as torch's)."""
    if conv.padding != (0,) or conv.stride != (1,) or conv.groups != 1:
        return conv(x.transpose(1, 2)).transpose(1, 2).contiguous()
    return _packed_conv(conv, conv.weight, conv.bias, int(conv.dilation[0]), x)


def _packed_conv(
    owner: torch.nn.Module,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    dilation: int,
    x: torch.Tensor,
) -> torch.Tensor:
    """conv1d(weight, bias, dilation) of time-major x [B, L, C_in] as [B, L', C_out]: through
    oneDNN in its channels-last layout (no copy either way) with `weight` packed for x's shape
    (kept on `owner`); the plain call where oneDNN does not run or the weights are of another
    dtype."""
    if (
        not torch.backends.mkldnn.is_available()
        or x.dtype not in (torch.bfloat16, torch.float32)
        or weight.dtype != x.dtype
        or x.shape[1] < dilation * (weight.shape[-1] - 1) + 1
    ):
        return _plain_conv(x, weight, bias, dilation)
    if weight.numel() < PACKED_MIN_WEIGHTS:
        return _channels_last_conv(owner, x, weight, bias, dilation)
    key = (tuple(x.shape), x.dtype, weight.data_ptr())
    if owner.__dict__.get("_omni_cpu_packed_weight") != (weight.data_ptr(), weight.dtype):
        # New weights (loaded, or moved to another dtype): the packs of the old ones go.
        owner.__dict__["_omni_cpu_packed_weight"] = (weight.data_ptr(), weight.dtype)
        owner.__dict__["_omni_cpu_packs"], owner.__dict__["_omni_cpu_calls"] = {}, {}
    packs: dict[tuple[Any, ...], Any] = owner.__dict__["_omni_cpu_packs"]
    calls: dict[tuple[Any, ...], int] = owner.__dict__["_omni_cpu_calls"]
    calls[key] = calls.get(key, 0) + 1
    if len(calls) > SHAPES_COUNTED:  # forget the rarest other shape
        del calls[min((k for k in calls if k != key), key=calls.__getitem__)]
    packed = packs.get(key, _UNPACKED)
    if packed is _UNPACKED:
        # Packed from a shape's second call, while fewer than PACKED_SHAPES are, or in place
        # of a packed shape that has come less often (kept by how often each comes: a
        # stream's steady chunk and the ramp's commonest sizes; a ragged last chunk never).
        rarest = min(packs, key=lambda k: calls.get(k, 0), default=None)
        full = len(packs) >= PACKED_SHAPES
        if calls[key] < 2 or (full and rarest is not None and calls.get(rarest, 0) >= calls[key]):
            return _channels_last_conv(owner, x, weight, bias, dilation)
        if full:
            del packs[rarest]
        try:
            packed = torch._C._nn.mkldnn_reorder_conv2d_weight(
                weight.unsqueeze(2).to_mkldnn(), [0, 0], [1, 1], [1, dilation], 1,
                [x.shape[0], x.shape[2], 1, x.shape[1]],
            )  # fmt: skip
            out = _pointwise(x, packed, bias, dilation)
        except RuntimeError:  # a shape oneDNN has no packed primitive for
            packed, out = None, _channels_last_conv(owner, x, weight, bias, dilation)
        packs[key] = packed  # None: this shape runs unpacked
        return out
    if packed is None:
        return _channels_last_conv(owner, x, weight, bias, dilation)
    return _pointwise(x, packed, bias, dilation)


def _pointwise(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, dilation: int
) -> torch.Tensor:
    # [B, L, C] is [B, C, 1, L] in channels-last strides, oneDNN's layout in and out.
    image = x.transpose(1, 2).unsqueeze(2)
    out = torch.ops.mkldnn._convolution_pointwise(
        image, packed, bias, [0, 0], [1, 1], [1, dilation], 1, "none", [], ""
    )
    return out.squeeze(2).transpose(1, 2).contiguous()  # a view where it came channels-last


def _channels_last_conv(
    owner: torch.nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    dilation: int,
) -> torch.Tensor:
    """torch's convolution on time-major x as a channels-last image, its weights kept
    channels-last on `owner` too: oneDNN's layout in and out, no copy, no packing."""
    cached = owner.__dict__.get("_omni_cpu_channels_last")
    if cached is None or cached[0] != (weight.data_ptr(), weight.dtype):
        image_weight = weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        cached = ((weight.data_ptr(), weight.dtype), image_weight)
        owner.__dict__["_omni_cpu_channels_last"] = cached
    out = F.conv2d(x.transpose(1, 2).unsqueeze(2), cached[1], bias, dilation=(1, dilation))
    return out.squeeze(2).transpose(1, 2).contiguous()


def _plain_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int
) -> torch.Tensor:
    out = F.conv1d(x.transpose(1, 2), weight, bias, dilation=dilation)
    return out.transpose(1, 2).contiguous()


def _strided_outputs(conv: torch.nn.ConvTranspose1d, full: torch.Tensor) -> torch.Tensor:
    """The transposed convolution's outputs [B, L * stride, C_out] of all but the first
    `spans - 1` inputs of time-major `full` [B, spans - 1 + L, C_in], whose kernel spans whole
    strides (K = spans * stride).

    Output t * stride + r sums input t - j through kernel tap j * stride + r: a stride-1
    convolution of `spans` taps into stride * C_out channels, ordered (r, c_out) so that
    its time-major output [B, L, stride * C_out] is already [B, L * stride, C_out]."""
    weight = conv.weight  # [C_in, C_out, K]
    c_in, c_out, kernel = weight.shape
    stride = int(conv.stride[0])
    spans = kernel // stride
    cached = conv.__dict__.get("_omni_cpu_as_conv")
    if cached is None or cached[0] != (weight.data_ptr(), weight.dtype):
        taps = weight.view(c_in, c_out, spans, stride).permute(3, 1, 0, 2).flip(-1)
        bias = None if conv.bias is None else conv.bias.repeat(stride)
        key = (weight.data_ptr(), weight.dtype)
        cached = (key, taps.reshape(stride * c_out, c_in, spans).contiguous(), bias)
        conv.__dict__["_omni_cpu_as_conv"] = cached
    _, taps, bias = cached
    out = _packed_conv(conv, taps, bias, 1, full)  # [B, L, stride * C_out]
    return out.view(out.shape[0], -1, c_out)


def _snake(act: Any, x: torch.Tensor, tail: torch.Tensor | None) -> torch.Tensor:
    """[tail | act(x)] along time for vLLM-Omni's SnakeBeta `act`, time-major: csrc/snake.cpp's
    one pass where the kernel module runs here, else the module's own forward and a
    concatenation."""
    from omni_cpu.kernels import gemv

    if getattr(act, "_exp_alpha", None) is None:
        act.precompute_exp_cache()
    fused = gemv.snake_beta(x, act._exp_alpha, act._inv_beta, tail)
    if fused is not None:
        return fused
    y = act(x.transpose(1, 2)).transpose(1, 2)
    return y.contiguous() if tail is None else torch.cat((tail, y), dim=1)


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
