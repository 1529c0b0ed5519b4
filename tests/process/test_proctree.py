"""Process-tree helpers on real processes: find a server's whole tree and leave nothing behind."""

from __future__ import annotations

import subprocess
import time

from omni_cpu.process import proctree

# A parent that ignores SIGTERM (as a wedged API server may) with two children.
STUBBORN_TREE = "trap '' TERM; sleep 60 & sleep 60 & wait"


def start_tree() -> tuple[subprocess.Popen[bytes], list[int]]:
    parent = subprocess.Popen(["sh", "-c", STUBBORN_TREE], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(proctree.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return parent, proctree.descendants(parent.pid)


def test_descendants_finds_every_child_of_the_root():
    parent, children = start_tree()
    try:
        assert len(children) == 2
        assert all(proctree.is_running(pid) for pid in children)
    finally:
        proctree.stop_tree(parent.pid, 0.5)


def test_stop_tree_kills_a_root_that_ignores_sigterm_and_its_children():
    parent, children = start_tree()
    left = proctree.stop_tree(parent.pid, 0.5)
    assert left == []
    assert not any(proctree.is_running(pid) for pid in [parent.pid, *children])
    assert parent.poll() is not None  # reaped: no zombie left either
