"""The GEMV kernel's build folder: shared by every checkout of the same source."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from omni_cpu.kernels import gemv


def _source(tmp_path: Path, name: str, text: str, extra: str = "// attention\n") -> Path:
    """A checkout's kernel folder: the bindings file and the module's other sources."""
    folder = tmp_path / name / "kernels"
    folder.mkdir(parents=True)
    path = folder / "gemv_avx512.cpp"
    path.write_text(text)
    for other in gemv.EXTRA_SOURCES:
        (folder / other).write_text(extra)
    return path


def test_same_source_in_two_checkouts_shares_one_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "main", "// v1\n"))
    first = gemv.cache_dir()
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "worktree", "// v1\n"))
    assert gemv.cache_dir() == first


def test_changed_source_gets_its_own_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "old", "// v1\n"))
    old = gemv.cache_dir()
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "new", "// v2\n"))
    new = gemv.cache_dir()
    assert new != old
    assert new.parent == old.parent == tmp_path / "cache"


def test_a_change_in_any_source_of_the_module_gets_its_own_build(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "old", "// v1\n", extra="// a\n"))
    old = gemv.cache_dir()
    monkeypatch.setattr(gemv, "SOURCE", _source(tmp_path, "new", "// v1\n", extra="// b\n"))
    assert gemv.cache_dir() != old
