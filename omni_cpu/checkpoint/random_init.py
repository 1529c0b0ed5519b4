"""Random values for each tensor: sane scales so activations neither vanish nor blow up.

Timing does not depend on weight values, but three things do matter:
- activations must stay finite and away from zero through 28 layers (matrices
  normal × 0.02 as Qwen initialises them, norms 1, biases 0);
- codebooks must not be zero, or the codec decoder outputs exact silence; the
  effective codebook is `embedding_sum / cluster_usage`, so usage is drawn in
  [1, 2) and the sum is scaled by it, giving unit-variance code vectors;
- the codec's convolutions use 1/sqrt(fan-in) so the waveform path keeps unit
  scale over ~30 layers and the clamped output is audible, not silent or ±1.

Random fp32 weights push some activations into denormal floats, which CPUs
process many times slower; every stage worker flushes them (platform/workers.py).

Each tensor's values depend only on (seed, tensor name), so files can be written
in any order and a single tensor can be regenerated on its own.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from omni_cpu.checkpoint import safetensors_file
from omni_cpu.checkpoint.layout import TensorSpec, numel

CHUNK_ELEMENTS = 1 << 22  # 16 MiB of float32 per chunk
QWEN_INIT_STD = 0.02


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _normal(seed: int, name: str, total: int, std: float) -> Iterator[np.ndarray]:
    rng = _rng(seed, name)
    for start in range(0, total, CHUNK_ELEMENTS):
        chunk = rng.standard_normal(min(CHUNK_ELEMENTS, total - start), dtype=np.float32)
        chunk *= np.float32(std)
        yield chunk


def _constant(total: int, value: float) -> Iterator[np.ndarray]:
    for start in range(0, total, CHUNK_ELEMENTS):
        yield np.full(min(CHUNK_ELEMENTS, total - start), value, dtype=np.float32)


def _cluster_usage(seed: int, name: str, size: int) -> np.ndarray:
    return _rng(seed, name).uniform(1.0, 2.0, size).astype(np.float32)


# ConvTranspose1d weights are [in, out, kernel]; each output sample sees `in`
# channels × kernel / stride taps: 1 in the 2x upsamplers, 2 in the decoder blocks.
_TRANSPOSED_TAPS = (
    (re.compile(r"^decoder\.upsample\.\d+\.0\.conv\.weight$"), 1),
    (re.compile(r"^decoder\.decoder\.\d+\.block\.1\.conv\.weight$"), 2),
)


# Each decoder block stacks 3 residual units: with unit-gain branches the signal
# grows ~3x per block (80x over 4 blocks) and the clamped output is a square wave.
# Quiet residual branches keep each block near unit gain, and a quiet last conv
# puts the waveform at an audible, unclipped level (RMS ~0.1-0.2).
_RESIDUAL_BRANCH_OUT = re.compile(r"^decoder\.decoder\.\d+\.block\.\d+\.conv2\.conv\.weight$")
_RESIDUAL_BRANCH_GAIN = 0.1
_WAVEFORM_OUT_GAIN = 0.15


def _codec_weight_std(name: str, spec: TensorSpec) -> float:
    """1/sqrt(fan-in) for the codec's linear, conv and transposed-conv weights."""
    fan_in = math.prod(spec.shape[1:])
    for pattern, taps in _TRANSPOSED_TAPS:
        if pattern.match(name):
            fan_in = spec.shape[0] * taps
    gain = 1.0
    if _RESIDUAL_BRANCH_OUT.match(name):
        gain = _RESIDUAL_BRANCH_GAIN
    elif name.startswith("decoder.decoder.") and spec.shape[0] == 1:  # the conv to 1 channel
        gain = _WAVEFORM_OUT_GAIN
    return gain / math.sqrt(max(fan_in, 1))


def model_values(seed: int, name: str, spec: TensorSpec) -> Iterator[np.ndarray]:
    """Values for a talker / code-predictor / speaker-encoder tensor (model.safetensors)."""
    total = numel(spec)
    if name.endswith("norm.weight"):
        return _constant(total, 1.0)
    if name.endswith(".bias"):
        return _constant(total, 0.0)
    if name.startswith("speaker_encoder."):
        # ECAPA-TDNN convolutions: 1/sqrt(fan-in) keeps the x-vector at unit scale,
        # the size of the codec embeddings it stands in for.
        return _normal(seed, name, total, 1.0 / math.sqrt(max(math.prod(spec.shape[1:]), 1)))
    return _normal(seed, name, total, QWEN_INIT_STD)


def speech_tokenizer_values(
    seed: int, name: str, spec: TensorSpec, st_config: dict[str, Any]
) -> Iterator[np.ndarray]:
    """Values for a speech-tokenizer tensor (encoder and codec decoder)."""
    total = numel(spec)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "cluster_usage":
        return iter([_cluster_usage(seed, name, total)])
    if leaf in ("embedding_sum", "embed_sum"):
        usage = _cluster_usage(seed, name.rsplit(".", 1)[0] + ".cluster_usage", spec.shape[0])
        rng = _rng(seed, name)
        codebook = rng.standard_normal(spec.shape, dtype=np.float32) * usage[:, None]
        return iter([codebook.reshape(-1)])
    if leaf == "initialized":
        return _constant(total, 1.0)
    if leaf in ("scale", "gamma"):
        part = "encoder_config" if name.startswith("encoder.") else "decoder_config"
        return _constant(total, float(st_config[part]["layer_scale_initial_scale"]))
    if leaf in ("alpha", "beta"):
        # SnakeBeta stores log-scale parameters: 0 means alpha = beta = 1.
        return _constant(total, 0.0)
    if leaf == "bias":
        return _constant(total, 0.0)
    if leaf == "weight" and len(spec.shape) == 1:  # RMSNorm / LayerNorm
        return _constant(total, 1.0)
    return _normal(seed, name, total, _codec_weight_std(name, spec))


def looks_random(checkpoint: Path) -> bool:
    """True for a checkpoint `make-checkpoint` wrote: every talker norm weight exactly 1.

    `model_values` writes norms as 1; a trained model's norms have moved (by the
    tenths, in Qwen3-TTS), so one exact 1 over a whole norm vector does not happen.
    Reads only the norm vectors (kilobytes). False where the file does not read.
    """
    path = Path(checkpoint) / "model.safetensors"
    try:
        names = [
            name
            for name in safetensors_file.read_layout(path)
            if name.startswith("talker.") and name.endswith("norm.weight")
        ]
        if not names:
            return False
        return all(bool((safetensors_file.read_tensor(path, name) == 1.0).all()) for name in names)
    except (OSError, ValueError, KeyError):
        return False
