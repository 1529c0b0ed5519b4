"""Write a random-weight Qwen3-TTS checkpoint with exactly the Hub files and layout.

Each file is written under a temporary name and renamed when complete, so an
interrupted run never leaves a file that looks finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_cpu.checkpoint import configs, random_init, safetensors_file, text_tokenizer
from omni_cpu.checkpoint.layout import (
    MODEL_FILE,
    SPEECH_TOKENIZER_FILE,
    Layout,
    file_layouts,
    numel,
)
from omni_cpu.errors import CheckpointDirError

# The Hub's speech_tokenizer/model.safetensors has no `__metadata__`; model.safetensors has.
_FILE_METADATA = {MODEL_FILE: safetensors_file.PT_METADATA, SPEECH_TOKENIZER_FILE: None}

# Every file a checkpoint has, in the order they are written.
CHECKPOINT_FILES: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "speech_tokenizer/config.json",
    "speech_tokenizer/preprocessor_config.json",
    SPEECH_TOKENIZER_FILE,
    MODEL_FILE,
)


@dataclass(frozen=True)
class CheckpointPlan:
    """What a checkpoint of one size holds: its JSON files and its tensors per file."""

    size: str
    kind: str
    json_files: dict[str, dict[str, Any]]
    layouts: dict[str, Layout]
    file_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def params(self) -> int:
        return sum(numel(spec) for layout in self.layouts.values() for spec in layout.values())

    @property
    def tensor_bytes(self) -> int:
        return sum(self.file_bytes.values())


def plan_checkpoint(
    size: str, kind: str = configs.DEFAULT_KIND, kv_heads: int | None = None
) -> CheckpointPlan:
    """The files, tensors and safetensors sizes of a checkpoint, without writing anything."""
    json_files = configs.config_files(size, kind, kv_heads)
    layouts = file_layouts(json_files["config.json"], json_files["speech_tokenizer/config.json"])
    sizes = {
        name: safetensors_file.file_bytes(layout, _FILE_METADATA[name])
        for name, layout in layouts.items()
    }
    return CheckpointPlan(
        size=size, kind=kind, json_files=json_files, layouts=layouts, file_bytes=sizes
    )


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise CheckpointDirError(
            f"{out_dir} exists and is not a directory", fix="choose another --out"
        )
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise CheckpointDirError(
            f"{out_dir} is not empty",
            fix="choose an empty or new directory, or pass --force to overwrite it",
        )


def holds_checkpoint(out_dir: Path, plan: CheckpointPlan) -> bool:
    """Whether `out_dir` already holds every file of `plan`'s checkpoint: the same JSON
    files, weights files of the planned sizes (their values, the seed's, are not read)."""
    if not all((out_dir / name).is_file() for name in CHECKPOINT_FILES):
        return False
    try:
        same_json = all(
            json.loads((out_dir / name).read_text(encoding="utf-8")) == content
            for name, content in plan.json_files.items()
        )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return same_json and all(
        (out_dir / name).stat().st_size == size for name, size in plan.file_bytes.items()
    )


def _replace_when_done(path: Path) -> tuple[Path, Callable[[], None]]:
    partial = path.with_name(path.name + ".partial")
    return partial, lambda: os.replace(partial, path)


def make_checkpoint(
    size: str,
    out_dir: Path | str,
    seed: int = 0,
    *,
    force: bool = False,
    on_bytes: Callable[[int], None] | None = None,
    kind: str = configs.DEFAULT_KIND,
    kv_heads: int | None = None,
) -> Path:
    """Write a random-weight checkpoint of `size` ("tiny", "0.6b", "1.7b") and `kind`.

    Refuses a non-empty `out_dir` unless `force`. `on_bytes(n)` is called as tensor
    bytes are written (for progress bars). `kv_heads`: configs.model_config's (tiny
    only). Returns the checkpoint directory.
    """
    out = Path(out_dir)
    plan = plan_checkpoint(size, kind, kv_heads)  # validates size and kind before touching the disk
    _check_out_dir(out, force)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)

    for name, content in plan.json_files.items():
        path, done = _replace_when_done(out / name)
        path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        done()
    text_tokenizer.write_tokenizer(out)

    st_config = plan.json_files["speech_tokenizer/config.json"]
    sources = {
        SPEECH_TOKENIZER_FILE: lambda name, spec: random_init.speech_tokenizer_values(
            seed, name, spec, st_config
        ),
        MODEL_FILE: lambda name, spec: random_init.model_values(seed, name, spec),
    }
    for name in (SPEECH_TOKENIZER_FILE, MODEL_FILE):
        path, done = _replace_when_done(out / name)
        safetensors_file.write_file(
            path, plan.layouts[name], sources[name], on_bytes, _FILE_METADATA[name]
        )
        done()
    return out


def summarize(plan: CheckpointPlan, out_dir: Path) -> dict[str, Any]:
    """A JSON-ready summary of a written checkpoint: files with bytes, params, totals."""
    files = [
        {"path": name, "bytes": (out_dir / name).stat().st_size}
        for name in CHECKPOINT_FILES
        if (out_dir / name).exists()
    ]
    return {
        "size": plan.size,
        "kind": plan.kind,
        "out": str(out_dir),
        "files": files,
        "params": plan.params,
        "params_by_file": {
            name: sum(numel(spec) for spec in layout.values())
            for name, layout in plan.layouts.items()
        },
        "bytes": sum(entry["bytes"] for entry in files),
    }
