"""Shared across folders: the real-machine dumps (unpacked once per session), the tiny
checkpoints, and the rule that only tests marked e2e start stage engines.

Builders and clients live in tests/helpers; fixtures more than one folder takes
are registered here.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

from omni_cpu import envs
from tests.helpers import sysroots

_BAR = pytest.StashKey[tuple[pytest.MonkeyPatch, Path]]()


def pytest_configure(config: pytest.Config) -> None:
    """Name the bar's file in the environment for the whole session.

    For the session, not per test: a module may copy os.environ at import for its
    subprocesses (tests/examples does). The file exists only while a test without
    the e2e marker runs, and a stage worker refuses only while it exists.
    """
    bar = Path(tempfile.gettempdir()) / f"omni-cpu-engines-barred-{os.getpid()}"
    patch = pytest.MonkeyPatch()
    patch.setenv(envs.ENGINES_BARRED.name, str(bar))  # omni_cpu.platform.workers
    config.stash[_BAR] = (patch, bar)


def pytest_unconfigure(config: pytest.Config) -> None:
    patch, bar = config.stash[_BAR]
    patch.undo()
    bar.unlink(missing_ok=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Engine-starting tests run one at a time, on one pytest-xdist worker (`make test`'s
    `-n 2 --dist loadgroup`): two runs at once would share the stages' cores and
    /dev/shm, which the fault tests check is left clean. The other worker takes the rest."""
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.xdist_group("engines"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Raise the bar for a test not marked e2e, lower it for one that is, before its fixtures.

    A hook, not a fixture: a module-scoped fixture the test requests is set up
    before any function-scoped one, and it may be what starts the engines.
    """
    _, bar = item.config.stash[_BAR]
    if item.get_closest_marker("e2e") is None:
        bar.write_text("")
    else:
        bar.unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """Fail a test not marked e2e whose run started a stage engine (however the test ended)."""
    try:
        return (yield)
    finally:
        _, bar = item.config.stash[_BAR]
        pids = bar.read_text().split() if bar.exists() else []
        bar.unlink(missing_ok=True)
        if pids:
            pytest.fail(
                f"{item.nodeid} started stage engines (pid {', '.join(pids)}) without the "
                "e2e marker: mark it @pytest.mark.e2e (`make test-fast` must start none)",
                pytrace=False,
            )


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
    metafunc.parametrize("dump", dumps, ids=[d.id for d in dumps])


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


@pytest.fixture(scope="session")
def tiny_kinds_8kv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`tiny_kinds` with 8 KV heads (16 query heads), as the published models have."""
    from omni_cpu.checkpoint.writer import make_checkpoint

    root = tmp_path_factory.mktemp("kinds-8kv")
    return {
        kind: Path(make_checkpoint("tiny", root / kind, seed=0, kind=kind, kv_heads=8))
        for kind in ("custom-voice", "voice-design", "base")
    }
