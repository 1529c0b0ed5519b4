"""The repository's scripts (scripts/, benchmarks/) as modules, so tests call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(path: str, name: str | None = None) -> ModuleType:
    """The script at `path` (from the repository root) as module `name` (default: its stem).

    Registered in sys.modules first: a dataclass resolves its annotations through it.
    """
    file = REPO / path
    name = name or file.stem
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
