"""Loading a checkpoint keeps only what was copied out of it, not the file's pages too."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from omni_cpu.platform.lean_load import released  # noqa: E402

MIB = 1 << 20


def mapped_rss_bytes(path: Path) -> int:
    """Resident bytes of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
            inside = len(fields) >= 6 and fields[-1] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(fields[1]) * 1024
    return total


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    """Eight 8 MiB tensors in one safetensors file, as a checkpoint shard is laid out."""
    tensors = {f"layer{i}.weight": torch.full((1024, 2048), float(i)) for i in range(8)}
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(tensors, str(path))
    return path


def weights(path: Path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no items()
            yield name, f.get_tensor(name)


def test_copied_tensors_leave_the_files_pages(checkpoint: Path) -> None:
    copies, resident = {}, []
    for name, tensor in released(weights(checkpoint)):
        copies[name] = tensor.clone()
        resident.append(mapped_rss_bytes(checkpoint))
    # Without releasing, the last look sees all 64 MiB read so far mapped in.
    assert max(resident) <= 2 * 8 * MIB + MIB
    assert [float(copies[f"layer{i}.weight"][0, 0]) for i in range(8)] == [
        float(i) for i in range(8)
    ]


def test_without_releasing_the_pages_pile_up(checkpoint: Path) -> None:
    resident = []
    for _name, tensor in weights(checkpoint):
        tensor.clone()
        resident.append(mapped_rss_bytes(checkpoint))
    assert resident[-1] >= 7 * 8 * MIB


def test_a_tensor_kept_for_later_still_reads_its_bytes(checkpoint: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(checkpoint), framework="pt") as f:
        kept = [tensor for _name, tensor in released((n, f.get_tensor(n)) for n in f.keys())]  # noqa: SIM118
        assert [float(t.sum()) for t in kept] == [float(i) * 1024 * 2048 for i in range(8)]


def test_tensors_that_are_not_a_mapped_file_are_left_alone(checkpoint: Path) -> None:
    calls = []
    anonymous = [("a", torch.ones(1024, 1024)), ("b", torch.ones(1024, 1024))]
    out = list(released(iter(anonymous), madvise=lambda *args: calls.append(args) or 0))
    assert calls == [] and [name for name, _ in out] == ["a", "b"]


def test_codec_modules_built_without_random_init_compute_the_same_buffers(tmp_path: Path) -> None:
    pytest.importorskip("vllm_omni")
    from safetensors import safe_open

    from omni_cpu.checkpoint.writer import make_checkpoint
    from omni_cpu.platform import lean_load

    model = Path(make_checkpoint("tiny", tmp_path / "tiny", seed=0))
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as codec_config,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as codec,
    )

    config = codec_config.Qwen3TTSTokenizerV2Config.from_pretrained(
        str(model), subfolder="speech_tokenizer"
    )
    with safe_open(str(model / "speech_tokenizer" / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    classes = {
        "encoder.": (codec.Qwen3TTSTokenizerV2Encoder, config.encoder_config),
        "decoder.": (codec.Qwen3TTSTokenizerV2Decoder, config.decoder_config),
    }
    plain = {prefix: cls._from_config(cfg) for prefix, (cls, cfg) in classes.items()}
    originals = {cls: cls.__dict__.get("_from_config") for cls, _ in classes.values()}
    try:
        lean_load.skip_random_init()
        lean = {prefix: cls._from_config(cfg) for prefix, (cls, cfg) in classes.items()}
    finally:
        for cls, original in originals.items():
            if original is None:
                delattr(cls, "_from_config")
            else:
                cls._from_config = original
    for prefix in classes:
        built = dict(plain[prefix].state_dict(keep_vars=True))
        built.update(dict(plain[prefix].named_buffers()))
        skipped = dict(lean[prefix].state_dict(keep_vars=True))
        skipped.update(dict(lean[prefix].named_buffers()))
        not_loaded = [name for name in built if prefix + name not in names]
        assert not_loaded, "the checkpoint should leave some computed buffers to the module"
        for name in not_loaded:
            assert torch.equal(built[name], skipped[name]), name
