"""Fixtures for the probe: facts of each real dump, and synthetic machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cpu.hardware.facts import Facts
from omni_cpu.hardware.probe import read_facts
from tests.helpers.machines import FakeMachine


@pytest.fixture(scope="session")
def _facts_cache() -> dict[Path, Facts]:
    return {}


@pytest.fixture
def dump_facts(dump_root: Path, _facts_cache: dict[Path, Facts]) -> Facts:
    """`read_facts` of the parametrized dump, read once per session."""
    if dump_root not in _facts_cache:
        _facts_cache[dump_root] = read_facts(dump_root)
    return _facts_cache[dump_root]


@pytest.fixture
def machine(tmp_path: Path) -> FakeMachine:
    """An empty synthetic sysroot to fill in."""
    return FakeMachine(tmp_path / "root")
