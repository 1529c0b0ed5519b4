"""What the engine processes are told to print: errors always, chatter only when verbose."""

from __future__ import annotations

import os
import warnings

import pytest

from omni_cpu.launch import logs
from omni_cpu.launch.plan import make_launch_plan


@pytest.fixture(autouse=True)
def environment_restored():
    """`apply_to_this_process` sets variables in os.environ: none may reach later tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_quiet_engines_still_log_errors() -> None:
    env = logs.engine_log_env(verbose=False)
    assert env["VLLM_LOGGING_LEVEL"] == "ERROR"
    assert env["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    assert env["TRANSFORMERS_VERBOSITY"] == "error"


def test_verbose_engines_log_info_and_keep_every_warning() -> None:
    env = logs.engine_log_env(verbose=True)
    assert env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert "PYTHONWARNINGS" not in env and "TRANSFORMERS_VERBOSITY" not in env


def test_the_environment_variable_turns_verbose_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_CPU_VERBOSE", raising=False)
    assert logs.verbose_requested() is False
    assert logs.verbose_requested(True) is True
    monkeypatch.setenv("OMNI_CPU_VERBOSE", "1")
    assert logs.verbose_requested() is True


def test_a_level_the_user_set_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    for key in logs.QUIET_ENV:
        if key != "VLLM_LOGGING_LEVEL":
            monkeypatch.delenv(key, raising=False)
    with warnings.catch_warnings():
        logs.apply_to_this_process(verbose=False)
        assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"
        assert os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"


def test_quiet_filter_drops_only_the_deprecated_rope_check() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        logs.apply_to_this_process(verbose=False)
        warnings.warn("`rope_config_validation` is deprecated", FutureWarning, stacklevel=1)
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something else is deprecated"]


def test_quiet_stages_load_weights_without_progress_bars(tiny_checkpoint) -> None:
    plan = make_launch_plan(str(tiny_checkpoint))
    quiet = logs.quiet_deploy_config(plan.deploy_config, verbose=False)
    assert [stage["use_tqdm_on_load"] for stage in quiet["stages"]] == [False, False]
    assert "use_tqdm_on_load" not in plan.deploy_config["stages"][0]  # the plan is unchanged
    assert logs.quiet_deploy_config(plan.deploy_config, verbose=True) == plan.deploy_config


def test_each_stage_names_its_own_device_so_the_stages_start_together(tiny_checkpoint) -> None:
    from omni_cpu.launch.startup import parallel_stages

    plan = make_launch_plan(str(tiny_checkpoint))
    stages = parallel_stages(plan.deploy_config)["stages"]
    assert [stage["devices"] for stage in stages] == ["0", "1"]
    assert "devices" not in plan.deploy_config["stages"][0]  # the plan is unchanged
