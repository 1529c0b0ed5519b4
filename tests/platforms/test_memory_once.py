"""One copy of what the talker stage holds: its KV cache resident where written, its text
embedding a view of the checkpoint, the code predictor's embeddings views of their stack."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch
from safetensors.torch import save_file
from torch import nn

from omni_cpu.platform import lazy_kv, talker_load

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def mapping_of(tensor: torch.Tensor) -> tuple[str, int]:
    """(file or "", resident KiB) of the mapping holding `tensor` (/proc/self/smaps)."""
    start = tensor.data_ptr()
    inside, name = False, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        words = line.split()
        if "-" in words[0] and not words[0].endswith(":"):
            low, high = (int(part, 16) for part in words[0].split("-"))
            inside, name = low <= start < high, (words[5] if len(words) > 5 else "")
        elif inside and line.startswith("Rss:"):
            return name, int(words[1])
    raise AssertionError("no mapping holds the tensor")


def resident_kib(tensor: torch.Tensor) -> int:
    return mapping_of(tensor)[1]


def test_lazy_zeros_are_zeros_resident_only_where_written() -> None:
    zeros = lazy_kv.lazy_zeros(64 << 20, torch.int8)
    assert zeros.shape == (64 << 20,)
    zeros[: 1 << 20] = 1
    assert resident_kib(zeros) < 8 << 10  # ~1 MiB written of 64 MiB (torch.zeros: all)
    assert int(zeros.sum()) == 1 << 20  # and the rest reads as zeros


def test_only_the_functions_large_flat_cpu_zeros_turn_lazy() -> None:
    def allocate(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(size, dtype=torch.int8, device="cpu"), torch.zeros(2, 3)

    big, small = lazy_kv.lazy(allocate)(4 << 20)
    assert lazy_kv.lazy(allocate).__wrapped__ is allocate
    assert resident_kib(big) < 1024 and int(big.sum()) == 0
    assert small.shape == (2, 3) and allocate.__globals__["torch"] is torch


def test_install_wraps_vllms_allocation_once() -> None:
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.allocate_kv_cache
    try:
        assert lazy_kv.install() and lazy_kv.install()
        assert gpu_model_runner.allocate_kv_cache.__wrapped__ is original
    finally:
        gpu_model_runner.allocate_kv_cache = original


class Talker(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.text_embedding = nn.Embedding(512, 64, dtype=dtype)


def test_the_text_embedding_is_a_view_of_the_checkpoint(tmp_path: Path) -> None:
    values = torch.randn(512, 64).to(torch.bfloat16)
    path = tmp_path / "model.safetensors"
    save_file({"talker.model.text_embedding.weight": values}, str(path))
    model = Talker(torch.bfloat16)
    assert talker_load.map_embeddings(model, [path]) == ["text_embedding.weight"]
    model.text_embedding.weight.weight_loader(model.text_embedding.weight, torch.zeros(1))
    assert torch.equal(model.text_embedding.weight, values)
    assert mapping_of(model.text_embedding.weight)[0] == str(path)  # not a copy
    model.text_embedding.weight.data[0] = 7  # copy-on-write: the file keeps its values
    assert talker_load.map_embeddings(Talker(torch.bfloat16), [path])
    again = Talker(torch.bfloat16)
    talker_load.map_embeddings(again, [path])
    assert torch.equal(again.text_embedding.weight, values)


def test_a_float32_stage_copies_its_text_embedding_as_before(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"talker.model.text_embedding.weight": torch.zeros(512, 64).bfloat16()}, str(path))
    model = Talker(torch.float32)
    assert talker_load.map_embeddings(model, [path]) == []
    assert not hasattr(model.text_embedding.weight, "weight_loader")


def test_the_code_predictors_embeddings_view_their_stack() -> None:
    embeds = nn.ModuleList(nn.Embedding(32, 8) for _ in range(3))
    model = types.SimpleNamespace(
        code_predictor=types.SimpleNamespace(get_input_embeddings=lambda: embeds),
        _stacked_codec_embed=torch.stack([e.weight.detach() for e in embeds]),
    )
    before = [e.weight.detach().clone() for e in embeds]
    assert talker_load.share_stacked_codec_embeddings(model) == 3 * 32 * 8 * 4
    stack = model._stacked_codec_embed
    for index, embed in enumerate(embeds):
        assert torch.equal(embed.weight, before[index])
        assert embed.weight.data_ptr() == stack[index].data_ptr()


def test_a_stack_that_differs_is_left_alone() -> None:
    embeds = nn.ModuleList(nn.Embedding(32, 8) for _ in range(2))
    model = types.SimpleNamespace(
        code_predictor=types.SimpleNamespace(get_input_embeddings=lambda: embeds),
        _stacked_codec_embed=torch.zeros(2, 32, 8),
    )
    assert talker_load.share_stacked_codec_embeddings(model) == 0
    assert embeds[0].weight.data_ptr() != model._stacked_codec_embed.data_ptr()
