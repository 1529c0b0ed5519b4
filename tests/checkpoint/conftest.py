"""Fixtures: the published 0.6B layout and one tiny checkpoint written per session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omni_cpu.checkpoint.writer import make_checkpoint

# The published Qwen3-TTS-12Hz-0.6B-CustomVoice checkpoint's layout: every file, config
# value, tensor name, shape and dtype.
REFERENCE = Path(__file__).with_name("qwen3-tts-0.6b-layout.json")


@pytest.fixture(scope="session")
def reference() -> dict[str, Any]:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="session")
def reference_weights(
    reference: dict[str, Any],
) -> dict[str, dict[str, tuple[tuple[int, ...], str]]]:
    """File → tensor name → (shape, dtype), as the reference lists them."""
    return {
        file: {name: (tuple(json.loads(shape)), dtype) for name, shape, dtype in rows}
        for file, rows in reference["weights"].items()
    }


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("tiny", tmp_path_factory.mktemp("ckpt") / "tiny", seed=0)
