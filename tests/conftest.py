"""Shared across folders: the real-machine dumps (unpacked once per session) and the tiny
checkpoints.

Builders and clients live in tests/helpers; fixtures more than one folder takes
are registered here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import sysroots


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight tiny Qwen3-TTS checkpoint in the real layout (seconds to make)."""
    pytest.importorskip("numpy", reason="making a checkpoint needs numpy (the runtime)")
    from omni_cpu.checkpoint.writer import make_checkpoint

    return Path(make_checkpoint("tiny", tmp_path_factory.mktemp("tiny") / "ckpt", seed=0))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize any test taking `dump` over every dump in the manifest."""
    if "dump" not in metafunc.fixturenames:
        return
    dumps = sysroots.load_dumps()
    if dumps:
        metafunc.parametrize("dump", dumps, ids=[d.id for d in dumps])
    else:
        metafunc.parametrize(
            "dump", [pytest.param(None, marks=pytest.mark.skip(reason=sysroots.MISSING_REASON))]
        )


class UnpackedDumps:
    """Unpacks each dump on first use into one session temp folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.roots: dict[str, Path] = {}

    def root(self, dump: sysroots.Dump) -> Path:
        if dump.id not in self.roots:
            self.roots[dump.id] = sysroots.unpack(dump.tarball, self.folder / dump.id)
        return self.roots[dump.id]


@pytest.fixture(scope="session")
def unpacked_dumps(tmp_path_factory: pytest.TempPathFactory) -> UnpackedDumps:
    return UnpackedDumps(tmp_path_factory.mktemp("sysroots"))


@pytest.fixture
def dump_root(dump: sysroots.Dump, unpacked_dumps: UnpackedDumps) -> Path:
    """The unpacked sysroot folder of the parametrized dump."""
    return unpacked_dumps.root(dump)


@pytest.fixture(scope="session")
def tiny_kinds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny checkpoint of each kind (custom-voice, voice-design, base), made once."""
    from omni_cpu.checkpoint.writer import make_checkpoint

    root = tmp_path_factory.mktemp("kinds")
    return {
        kind: Path(make_checkpoint("tiny", root / kind, seed=0, kind=kind))
        for kind in ("custom-voice", "voice-design", "base")
    }
