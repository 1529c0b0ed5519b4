"""A stage worker started where engines are barred (a test not marked e2e) fails and says so.

What sets the variable and fails the test: tests/test_engines_barred.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from omni_cpu import envs
from omni_cpu.platform.workers import CPUARWorker

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def test_a_stage_worker_starting_where_engines_are_barred_fails_and_leaves_its_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bar = tmp_path / "engines-barred"
    bar.write_text("")
    monkeypatch.setenv(envs.ENGINES_BARRED.name, str(bar))
    with pytest.raises(RuntimeError, match="must be marked e2e"):
        CPUARWorker(vllm_config=None, local_rank=0, rank=0, distributed_init_method="")
    assert bar.read_text().split() == [str(os.getpid())]
