"""A make-checkpoint checkpoint is told from a trained one (check-weights says so)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from omni_cpu.checkpoint.random_init import looks_random


def test_a_make_checkpoint_checkpoint_looks_random(tiny_kinds: dict[str, Path]) -> None:
    assert all(looks_random(path) for path in tiny_kinds.values())


def test_one_trained_norm_weight_is_enough_to_say_it_is_not(
    tiny_kinds: dict[str, Path], tmp_path: Path
) -> None:
    source = tiny_kinds["custom-voice"] / "model.safetensors"
    target = tmp_path / "model.safetensors"
    shutil.copyfile(source, target)
    with target.open("r+b") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        entry = json.loads(handle.read(length))["talker.model.norm.weight"]
        assert entry["dtype"] == "BF16"
        handle.seek(8 + length + entry["data_offsets"][0])
        handle.write(struct.pack("<H", 0x3F81))  # 1.0078125, the next bf16 above 1
    assert not looks_random(tmp_path)


def test_a_folder_without_weights_is_not_called_random(tmp_path: Path) -> None:
    assert not looks_random(tmp_path)
