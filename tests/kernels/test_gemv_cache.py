"""The kernel modules' build folders: shared by every checkout of the same sources."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from omni_cpu.kernels import build


def _checkout(tmp_path: Path, name: str, text: str = "// v1\n", header: str = "// h\n") -> Path:
    """A checkout's csrc/ folder: every module's sources and a header beside them."""
    csrc = tmp_path / name / "csrc"
    csrc.mkdir(parents=True)
    for module in build.BUILDS:
        for source in module.sources:
            (csrc / source).write_text(f"{text}// {source}\n")
    (csrc / "kernel_common.h").write_text(header)
    return csrc


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "cache"))


def test_same_sources_in_two_checkouts_share_one_build(tmp_path: Path) -> None:
    main, worktree = _checkout(tmp_path, "main"), _checkout(tmp_path, "worktree")
    assert build.cache_dir(build.AVX512, main) == build.cache_dir(build.AVX512, worktree)


def test_changed_source_gets_its_own_build(tmp_path: Path) -> None:
    old = build.cache_dir(build.AVX512, _checkout(tmp_path, "old"))
    new = build.cache_dir(build.AVX512, _checkout(tmp_path, "new", text="// v2\n"))
    assert new != old
    assert new.parent == old.parent == tmp_path / "cache"


def test_a_change_in_any_source_of_the_module_gets_its_own_build(tmp_path: Path) -> None:
    old, new = _checkout(tmp_path, "old"), _checkout(tmp_path, "new")
    (new / build.AVX512.sources[-1]).write_text("// another step\n")
    assert build.cache_dir(build.AVX512, new) != build.cache_dir(build.AVX512, old)
    assert build.cache_dir(build.AVX2, new) != build.cache_dir(build.AVX2, old)  # shared file


def test_a_change_in_a_header_gets_its_own_build_of_each_module(tmp_path: Path) -> None:
    names = {}
    for version, header in (("a", "// a\n"), ("b", "// b\n"), ("b again", "// b\n")):
        csrc = _checkout(tmp_path, version, header=header)
        names[version] = [build.cache_dir(module, csrc) for module in build.BUILDS]
    assert all(a != b for a, b in zip(names["a"], names["b"], strict=True))
    assert names["b"] == names["b again"]  # the same header: the same builds


def test_the_avx_vnni_compile_of_the_avx2_sources_is_a_build_of_its_own(tmp_path: Path) -> None:
    csrc = _checkout(tmp_path, "checkout")
    assert build.AVX2_VNNI.sources == build.AVX2.sources
    assert build.cache_dir(build.AVX2_VNNI, csrc) != build.cache_dir(build.AVX2, csrc)


def test_a_build_finds_its_headers_beside_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csrc = _checkout(tmp_path, "checkout", header="// shared glue\n")
    seen = {}

    def load(**kwargs):
        seen.update(kwargs)
        return object()

    monkeypatch.setattr("torch.utils.cpp_extension.load", load)
    assert build._load.__wrapped__(build.AVX2, csrc) is not None
    folder = Path(seen["build_directory"])
    assert folder == build.cache_dir(build.AVX2, csrc)
    assert (folder / "kernel_common.h").read_text() == "// shared glue\n"
    assert seen["sources"] == [str(folder / name) for name in build.AVX2.sources]  # no headers
    assert seen["name"] == build.AVX2.name and seen["extra_cflags"] == list(build.AVX2.flags)


def test_each_module_is_chosen_by_the_cpus_flags_and_the_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zen4 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"}
    cases = [
        (zen4, "auto", build.AVX512),
        (zen4, "avx2", build.AVX2),
        (zen4 | {"avx_vnni"}, "avx2", build.AVX2_VNNI),  # a Sapphire Rapids told to use AVX2
        ({"avx2", "fma", "f16c"}, "auto", build.AVX2),  # Zen 2/3
        ({"avx2", "fma", "f16c", "avx_vnni"}, "auto", build.AVX2_VNNI),  # Alder Lake
        ({"avx", "sse4_2"}, "auto", None),
        (zen4, "off", None),
    ]
    for flags, switch, want in cases:
        monkeypatch.setattr(build, "cpu_isa", lambda flags=flags: frozenset(flags))
        monkeypatch.setenv("OMNI_CPU_GEMV", switch)
        assert build.chosen() == want, (sorted(flags), switch)
