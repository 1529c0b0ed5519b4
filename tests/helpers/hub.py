"""A Hugging Face hub cache laid out as huggingface_hub leaves a download, for offline tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SNAPSHOT = "0123abcd"  # the commit a download of `main` names


def cache_model(cache: Path, hub_id: str, checkpoint: Path) -> Path:
    """`checkpoint` as `cache` holds a download of `hub_id` at main: its snapshot folder."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / SNAPSHOT
    shutil.copytree(checkpoint, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    return snapshot


def offline_env(cache: Path) -> dict[str, str]:
    """This environment with `cache` as the hub cache and the hub kept out."""
    return {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
