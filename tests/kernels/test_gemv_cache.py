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


def _module(tmp_path: Path, name: str, header: str) -> tuple[Path, ...]:
    """A checkout's kernel folder with a header beside the sources: the AVX2 module's files."""
    path = _source(tmp_path, name, "// v1\n")
    for source in gemv.AVX2_SOURCES:
        path.with_name(source.name).write_text("// avx2\n")
    path.with_name("kernel_common.h").write_text(header)
    return tuple(path.with_name(source.name) for source in gemv.AVX2_SOURCES)


def test_a_change_in_a_header_gets_its_own_build_of_each_module(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    names = {}
    for version in ("a", "b", "b again"):
        avx2 = _module(tmp_path, version, f"// {version[0]}\n")
        monkeypatch.setattr(gemv, "SOURCE", avx2[0].with_name(gemv.SOURCE.name))
        names[version] = (gemv.cache_dir(), gemv.cache_dir(avx2, gemv.AVX2_FLAGS))
    assert names["a"][0] != names["b"][0] and names["a"][1] != names["b"][1]
    assert names["b"] == names["b again"]  # the same header: the same builds


def test_a_build_finds_its_headers_beside_its_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))
    avx2 = _module(tmp_path, "checkout", "// shared glue\n")
    seen = {}

    def load(**kwargs):
        seen.update(kwargs)
        return object()

    monkeypatch.setattr("torch.utils.cpp_extension.load", load)
    assert gemv._build.__wrapped__("probe", avx2, tuple(gemv.AVX2_FLAGS)) is not None
    build = Path(seen["build_directory"])
    assert build == gemv.cache_dir(avx2, gemv.AVX2_FLAGS)
    assert (build / "kernel_common.h").read_text() == "// shared glue\n"
    assert seen["sources"] == [str(build / path.name) for path in avx2]  # headers: not compiled
