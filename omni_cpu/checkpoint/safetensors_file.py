"""Write and read the safetensors format with numpy alone, one tensor at a time.

The format: an 8-byte little-endian header length N, N bytes of JSON (names →
dtype, shape, byte offsets; padded with spaces to a multiple of 8), then the raw
little-endian tensor bytes. The writer lays a file out the way the `safetensors`
library does (tensors sorted by dtype then name, `__metadata__` {"format": "pt"}
first, where the Hub file has it), so a generated file has the Hub file's exact
size: 3,833,402,552 bytes for the 1.7B model.safetensors and 682,293,092 for the
speech tokenizer (whose Hub file carries no `__metadata__`). Streaming
keeps peak memory at one chunk, not one model: the 1.7B must not need 2x RAM.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from omni_cpu.checkpoint.layout import TensorSpec, numel

# safetensors dtype codes and element sizes for the dtypes Qwen3-TTS uses.
DTYPE_CODES = {"bfloat16": "BF16", "float32": "F32"}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
ITEM_BYTES = {"bfloat16": 2, "float32": 4}
MAX_HEADER_BYTES = 100 << 20  # the safetensors library's own limit
# The library orders tensors by dtype (larger alignment first), then by name.
_DTYPE_RANK = {"float32": 0, "bfloat16": 1}

# A tensor's data arrives as float32 chunks, in row-major order.
ChunkSource = Callable[[str, TensorSpec], Iterable[np.ndarray]]


def file_order(layout: Mapping[str, TensorSpec]) -> list[str]:
    """Names in the order the safetensors library stores them."""
    return sorted(layout, key=lambda name: (_DTYPE_RANK[layout[name].dtype], name))


PT_METADATA = {"format": "pt"}


def header_bytes(
    layout: Mapping[str, TensorSpec], metadata: Mapping[str, str] | None = PT_METADATA
) -> bytes:
    """The 8-byte length plus the padded JSON header for these tensors."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in file_order(layout):
        spec = layout[name]
        size = numel(spec) * ITEM_BYTES[spec.dtype]
        header[name] = {
            "dtype": DTYPE_CODES[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def file_bytes(
    layout: Mapping[str, TensorSpec], metadata: Mapping[str, str] | None = PT_METADATA
) -> int:
    """Exact size of the file these tensors make."""
    data = sum(numel(spec) * ITEM_BYTES[spec.dtype] for spec in layout.values())
    return len(header_bytes(layout, metadata)) + data


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def _encode(chunk: np.ndarray, dtype: str) -> bytes:
    if dtype == "bfloat16":
        return to_bfloat16_bits(chunk).astype("<u2", copy=False).tobytes()
    return np.ascontiguousarray(chunk, dtype="<f4").tobytes()


def write_file(
    path: Path,
    layout: Mapping[str, TensorSpec],
    chunks: ChunkSource,
    on_bytes: Callable[[int], None] | None = None,
    metadata: Mapping[str, str] | None = PT_METADATA,
) -> int:
    """Write `layout` to `path`, pulling each tensor's data from `chunks`; returns bytes written."""
    head = header_bytes(layout, metadata)
    written = len(head)
    with path.open("wb") as out:
        out.write(head)
        for name in file_order(layout):
            spec = layout[name]
            expected = numel(spec)
            seen = 0
            for chunk in chunks(name, spec):
                seen += chunk.size
                data = _encode(chunk, spec.dtype)
                out.write(data)
                written += len(data)
                if on_bytes is not None:
                    on_bytes(len(data))
            if seen != expected:
                raise ValueError(f"{name}: got {seen} values for shape {spec.shape}")
    return written


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor entries plus `__metadata__`).

    Bounded like the `safetensors` library (MAX_HEADER_BYTES); ValueError for a file
    that is not one (short, a header length past the limit, truncated, not a JSON object).
    """
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise ValueError("not a safetensors file (header length)")
        text = handle.read(length)
    if len(text) != length:
        raise ValueError("truncated header")
    header = json.loads(text)
    if not isinstance(header, dict):
        raise ValueError("not a safetensors header")
    return header


def read_layout(path: Path) -> dict[str, TensorSpec]:
    """Name → (shape, dtype name) of every tensor in a safetensors file."""
    return {
        name: TensorSpec(tuple(entry["shape"]), DTYPE_NAMES.get(entry["dtype"], entry["dtype"]))
        for name, entry in read_header(path).items()
        if name != "__metadata__"
    }


def read_tensor(path: Path, name: str) -> np.ndarray:
    """One tensor as float32 (bf16 widened), read without loading the rest of the file."""
    return dict(_read(path, [name]))[name]


def _read(path: Path, names: Iterable[str] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
        header.pop("__metadata__", None)
        for name in header if names is None else names:
            entry = header[name]
            start, end = entry["data_offsets"]
            handle.seek(8 + length + start)
            raw = handle.read(end - start)
            yield name, _decode(raw, entry["dtype"]).reshape(entry["shape"])


def _decode(raw: bytes, code: str) -> np.ndarray:
    if code == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
    if code == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    raise ValueError(f"unsupported safetensors dtype {code}")


def iter_tensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of a file as float32, one at a time."""
    yield from _read(path)
