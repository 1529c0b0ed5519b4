"""A CPU stage starts without vLLM-Omni's machine-wide device lock (omni_cpu.platform.init_locks).

The real call site and the real lock file: with the lock taken, a second process
starting a stage on the same device label would wait for this one's whole start-up.
"""

from __future__ import annotations

import fcntl
import os

import pytest

stage_runtime = pytest.importorskip("vllm_omni.engine.stage_runtime")
from vllm_omni.engine.stage_init_utils import device_init_lock_path  # noqa: E402

from omni_cpu.platform import init_locks  # noqa: E402

LABEL = 4242  # a device label no stage of a real run names


def lock_is_free(path: str) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture()
def lock_path():
    path = device_init_lock_path(LABEL)
    existed = os.path.exists(path)
    yield path
    if not existed:
        os.unlink(path)


def test_a_cpu_stage_starts_without_the_device_lock(lock_path: str) -> None:
    init_locks.install()
    try:
        held = stage_runtime.acquire_device_locks(0, {}, 1, visible_devices=str(LABEL))
        assert held == []
        assert lock_is_free(lock_path)  # another process could start its stage now
    finally:
        init_locks.uninstall()


def test_without_it_vllm_omni_holds_the_lock_for_the_stages_start_up(lock_path: str) -> None:
    held = stage_runtime.acquire_device_locks(0, {}, 1, visible_devices=str(LABEL))
    try:
        assert held and not lock_is_free(lock_path)
    finally:
        stage_runtime.release_device_locks(held)
