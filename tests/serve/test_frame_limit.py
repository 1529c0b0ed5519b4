"""`serve --accept-frame-limit`: a Base request at its frame budget keeps its audio (no 500)."""

from __future__ import annotations

import pytest

qwen3_tts = pytest.importorskip(
    "vllm_omni.entrypoints.openai.tts_adapters.qwen3_tts", reason="needs the vLLM-Omni runtime"
)
Adapter = qwen3_tts.Qwen3TTSAdapter
AT_BUDGET = {"task_type": ["Base"], qwen3_tts.QWEN3_TTS_EFFECTIVE_MAX_TOKENS_KEY: [12]}


def _validate(adapter_cls) -> None:
    adapter_cls.validate_generation(
        object.__new__(adapter_cls), AT_BUDGET, stage0_finish_reason="length", output_tokens=12
    )


def test_vllm_omni_refuses_a_base_request_that_reached_its_budget():
    with pytest.raises(qwen3_tts.Qwen3TTSCodecLimitError):
        _validate(Adapter)


def test_accept_frame_limit_lets_it_through(monkeypatch):
    from omni_cpu.serve.frame_limit import accept_frame_limit

    monkeypatch.setattr(Adapter, "validate_generation", Adapter.validate_generation)
    monkeypatch.setattr(Adapter, "validates_generation", Adapter.validates_generation)
    accept_frame_limit()
    _validate(Adapter)  # no error
    assert Adapter.validates_generation is False
