"""The talker stage's packed-weight cache entry: keyed by the checkpoint it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch
from safetensors.torch import save_file

from omni_cpu.kernels import gemv
from omni_cpu.platform import talker_load

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]
needs_any_gemv = pytest.mark.skipif(
    gemv.kernel() is None and gemv.avx2_kernel() is None, reason="no omni-cpu GEMV on this CPU"
)


def checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"talker.w": torch.zeros(64, 64)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "qwen3_tts"}')
    (folder / "speech_tokenizer").mkdir(exist_ok=True)
    save_file({"decoder.w": torch.zeros(4)}, str(folder / "speech_tokenizer" / "model.safetensors"))
    return folder


def test_the_talker_is_keyed_by_the_checkpoints_own_safetensors_files(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "ckpt")
    assert talker_load.checkpoint_files(str(folder)) == [folder / "model.safetensors"]


def test_a_hub_id_that_is_not_downloaded_has_no_files(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert talker_load.checkpoint_files("someone/not-downloaded") == []


@needs_any_gemv
def test_each_format_and_dtype_of_a_checkpoint_has_its_own_entry(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", str(tmp_path / "cache"))
    folder = str(checkpoint(tmp_path / "ckpt"))
    paths = {
        talker_load.open_packing(folder, None, weights, dtype).cache.path
        for weights in ("model", "int8", "int4")
        for dtype in (torch.bfloat16, torch.float32)
    }
    assert len(paths) == 6
    again = talker_load.open_packing(folder, None, "int8", torch.bfloat16)
    assert again.cache.path in paths  # the same load asks for the same entry


@needs_any_gemv
def test_a_changed_config_is_another_entry(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", str(tmp_path / "cache"))
    folder = checkpoint(tmp_path / "ckpt")
    before = talker_load.open_packing(str(folder), None, "int8", torch.bfloat16).cache.entry
    (folder / "config.json").write_text('{"model_type": "qwen3_tts", "layers": 2}')
    after = talker_load.open_packing(str(folder), None, "int8", torch.bfloat16).cache.entry
    assert after.key != before.key


def test_off_loads_without_a_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", "off")
    folder = str(checkpoint(tmp_path / "ckpt"))
    assert talker_load.open_packing(folder, None, "int8", torch.bfloat16).cache is None


@needs_any_gemv
def test_a_second_load_maps_every_packed_layer_and_computes_the_same_logits(
    monkeypatch, tmp_path: Path, tiny_kinds: dict[str, Path]
) -> None:
    # vLLM's own loader on the tiny checkpoint, in this process, as check-weights loads it
    # (int4 goes the same way; the e2e runs start both formats twice).
    from omni_cpu.platform.inprocess import load_talker

    weights = "int8"

    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", str(tmp_path / "cache"))
    first = load_talker(tiny_kinds["custom-voice"], weights)
    second = load_talker(tiny_kinds["custom-voice"], weights)
    packed = first.load.packing
    assert (packed.status, packed.cached) == ("miss", 0) and packed.packed > 0
    mapped = second.load.packing
    assert (mapped.status, mapped.packed, mapped.cached) == ("hit", 0, packed.packed)
    assert len(mapped.skipped) == packed.packed  # none of them copied from the checkpoint
    embeds = torch.randn(
        5, first.model.talker_config.hidden_size, generator=torch.Generator().manual_seed(0)
    )
    _, want = first.forward(embeds, reset=True)
    _, got = second.forward(embeds, reset=True)
    assert torch.equal(got, want)


def test_the_talker_is_built_without_random_values(tmp_path: Path) -> None:
    """vLLM's strict load fills every parameter; drawing random ones first cost 2.7 s."""
    seen: dict[str, torch.Tensor] = {}

    def load() -> torch.nn.Module:
        marker = torch.zeros(3)
        torch.nn.init.normal_(marker)  # what nn.Embedding and nn.Linear call when built
        seen["marker"] = marker
        return torch.nn.Embedding(8, 4)

    folder = str(checkpoint(tmp_path / "ckpt"))
    _, report = talker_load.load_talker(load, folder, None, "model", torch.float32)
    assert torch.equal(seen["marker"], torch.zeros(3))
    after = torch.zeros(3)
    torch.nn.init.normal_(after)
    assert not torch.equal(after, torch.zeros(3))  # and draw again after the load
    assert report.load_s >= 0
