"""From `--deploy-profile auto|FILE` to what each stage process gets: env and engine args."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from omni_cpu.errors import InputError, ProfileMismatchError
from omni_cpu.launch.logs import engine_log_env
from omni_cpu.platform import WEIGHT_CHOICES, WEIGHTS_ENV
from omni_cpu.profile import Profile, deploy_config_dict, load_profile, stage_env

# Messages from omni_cpu.profile.check that mean the profile names CPUs this
# machine cannot give it: running anyway would bind threads to nothing.
_CPU_PROBLEMS = ("do not exist here", "are offline", "outside this process's")

# Set in the driver (unless already set) and inherited by every stage: vLLM's CPU
# platform is picked explicitly. What the engines print is launch.logs' (errors only
# unless --verbose), and goes to stderr, so stdout keeps only omni-cpu's own output.
DRIVER_ENV_DEFAULTS = {"VLLM_TARGET_DEVICE": "cpu"}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything `run` will start, computed without importing torch or vLLM."""

    model: str
    profile: Profile
    profile_source: str  # "auto" or the file
    replica: int
    deploy_config: dict[str, Any]
    problems: tuple[str, ...]  # non-fatal check_profile findings

    def stage_env(self, stage_id: int) -> dict[str, str]:
        return stage_env(self.profile, self.replica, stage_id)

    def stage_engine_args(self, stage_id: int) -> dict[str, Any]:
        for stage in self.deploy_config["stages"]:
            if stage["stage_id"] == stage_id:
                return dict(stage)
        raise KeyError(stage_id)

    def describe(self) -> dict[str, Any]:
        """The dry run: what each stage process gets."""
        replica = self.profile.replicas[self.replica]
        return {
            "model": self.model,
            "deploy_profile": self.profile_source,
            "replica": self.replica,
            "driver_env": {**DRIVER_ENV_DEFAULTS, **engine_log_env(verbose=False)},
            "frontend_cpus": replica.frontend_cpus,
            "streaming": {
                "initial_codec_chunk_frames": self.profile.streaming.initial_codec_chunk_frames,
                "codec_chunk_frames": self.profile.streaming.codec_chunk_frames,
                "codec_left_context_frames": self.profile.streaming.codec_left_context_frames,
            },
            "stages": [
                {
                    "stage_id": stage.stage_id,
                    "name": stage.name,
                    "env": self.stage_env(stage.stage_id),
                    "engine_args": self.stage_engine_args(stage.stage_id),
                }
                for stage in replica.stages
            ],
            "warnings": list(self.problems),
        }

    def write_deploy_config(self, directory: Path) -> Path:
        """The vLLM-Omni deploy YAML for this replica, in `directory`."""
        path = Path(directory) / "omni-cpu-deploy.yaml"
        path.write_text(yaml.safe_dump(self.deploy_config, sort_keys=False))
        return path


def resolve_profile(
    spec: str, model: str, weights: str = "model"
) -> tuple[Profile, tuple[str, ...]]:
    """`auto` plans this machine for `model`; a file is loaded and checked against this machine.

    `weights` is a planning input for `auto` (it decides whether the stages share
    cores on a small box); a file keeps the placement it was written with.
    """
    from omni_cpu.hardware.probe import read_facts
    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.profile.check import check_profile

    if spec == "auto":
        from omni_cpu.plan import plan_for_machine

        # Engines start now, on this machine as it is: size for the memory free now.
        facts, profile = plan_for_machine(
            model if Path(model).exists() else None, fit_available_memory=True, weights=weights
        )
    else:
        profile = load_profile(spec)
        facts = read_facts("/")
    try:
        footprint = footprint_for_model(model if Path(model).exists() else None)
    except Exception:  # a footprint is only needed for the memory checks
        footprint = None
    problems = check_profile(profile, facts, footprint)
    fatal = [problem for problem in problems if any(key in problem for key in _CPU_PROBLEMS)]
    if fatal:
        raise ProfileMismatchError(
            f"{spec}: {fatal[0]}" + (f" (and {len(fatal) - 1} more)" if len(fatal) > 1 else ""),
            "plan this machine instead: --deploy-profile auto, or omni-cpu probe --output FILE",
        )
    return profile, tuple(problems)


def with_weights(profile: Profile, weights: str) -> Profile:
    """`profile` whose stages load the talker's weights as `weights` ("model" or "int8").

    The choice travels as an environment variable in the profile's `env`, so a
    profile file can carry it too (`env: {OMNI_CPU_WEIGHTS: int8}`).
    """
    if weights not in WEIGHT_CHOICES:
        raise InputError(f"--weights {weights}", f"use one of: {', '.join(WEIGHT_CHOICES)}")
    if weights == "model":
        return profile
    return dataclasses.replace(profile, env={**profile.env, WEIGHTS_ENV: weights})


def make_launch_plan(
    model: str, deploy_profile: str = "auto", replica: int = 0, weights: str = "model"
) -> LaunchPlan:
    """Resolve the profile and build the deploy config for one replica."""
    if weights not in WEIGHT_CHOICES:
        raise InputError(f"--weights {weights}", f"use one of: {', '.join(WEIGHT_CHOICES)}")
    profile, problems = resolve_profile(deploy_profile, model, weights)
    profile = with_weights(profile, weights)
    if not 0 <= replica < len(profile.replicas):
        raise ProfileMismatchError(
            f"the profile has {len(profile.replicas)} replica(s), not {replica + 1}",
            "use --replica 0",
        )
    source = deploy_profile if deploy_profile == "auto" else os.path.abspath(deploy_profile)
    return LaunchPlan(
        model=model,
        profile=profile,
        profile_source=source,
        replica=replica,
        deploy_config=deploy_config_dict(profile, replica),
        problems=problems,
    )
