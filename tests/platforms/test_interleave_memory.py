"""A spanning replica's talker interleaves its memory over every node it may use; every
other stage keeps vLLM's binding to its first CPU's node."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from vllm.utils import cpu_resource_utils

from omni_cpu import envs
from omni_cpu.platform import workers

pytestmark = [pytest.mark.cpu]


@pytest.fixture
def memory_op(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The nodes each call of torch.ops._C.init_cpu_memory_env was given."""
    calls: list[list[int]] = []
    fake_ops = SimpleNamespace(_C=SimpleNamespace(init_cpu_memory_env=calls.append))
    monkeypatch.setattr(workers.torch, "ops", fake_ops)
    monkeypatch.setattr(cpu_resource_utils, "get_visible_memory_node", lambda: [3, 2])
    return calls


def test_the_spanning_talker_interleaves_over_its_visible_nodes(monkeypatch, memory_op):
    monkeypatch.setenv(envs.INTERLEAVE_MEMORY.name, "1")
    assert workers.interleave_memory_where_spanning() == [2, 3]
    assert memory_op == [[2, 3]]


def test_a_stage_without_the_knob_keeps_vllms_one_node_binding(monkeypatch, memory_op):
    monkeypatch.delenv(envs.INTERLEAVE_MEMORY.name, raising=False)
    assert workers.interleave_memory_where_spanning() is None
    assert memory_op == []


def test_one_visible_node_has_nothing_to_interleave(monkeypatch, memory_op):
    monkeypatch.setenv(envs.INTERLEAVE_MEMORY.name, "1")
    monkeypatch.setattr(cpu_resource_utils, "get_visible_memory_node", lambda: [0])
    assert workers.interleave_memory_where_spanning() is None
    assert memory_op == []
