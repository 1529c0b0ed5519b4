"""From `--deploy-profile auto|FILE` to what each stage process gets: env and engine args."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from omni_cpu import envs
from omni_cpu.errors import ProfileMismatchError
from omni_cpu.launch.logs import engine_log_env
from omni_cpu.platform import DRIVER_ENV
from omni_cpu.profile import Profile, choices, deploy_config_dict, stage_env
from omni_cpu.profile.sampling import Sampling, with_sampling

# Set in the driver (unless already set) and inherited by every stage: vLLM's CPU
# platform, one process per stage (omni_cpu.platform.DRIVER_ENV says why). What the
# engines print is launch.logs' (errors only unless --verbose), and goes to stderr,
# so stdout keeps only omni-cpu's own output.
DRIVER_ENV_DEFAULTS = dict(DRIVER_ENV)


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
                "codec_chunk_ramp": list(self.profile.streaming.codec_chunk_ramp),
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


def with_weights(profile: Profile, weights: str) -> Profile:
    """`profile` whose stages load the talker's weights as `weights` (`envs.WEIGHTS`' choices).

    The choice travels in the talker's stage entry, as a profile file says it
    (`additional_config: {omni_cpu: {weights: int8}}`); "model" keeps the file's.
    """
    weights = envs.WEIGHTS.read(weights, "--weights")
    if weights == "model":
        return profile
    return profile.with_choice(envs.WEIGHTS, weights)


def make_launch_plan(
    model: str,
    deploy_profile: str = "auto",
    replica: int = 0,
    weights: str = "model",
    force: bool = False,
    sampling: Sampling | None = None,
) -> LaunchPlan:
    """Resolve the profile and build the deploy config for one replica.

    A profile whose memory does not fit this machine is refused unless `force`; so is
    a knob that the stages would get (from here or from the profile) set to a value
    it does not take, before any engine starts. `sampling` overrides the profile's
    sampling settings for this launch (omni_cpu.profile.sampling).
    """
    from omni_cpu.plan.resolve import FATAL_TO_START, FORCED, resolve

    if sampling is not None:
        sampling.check()  # a bad option is refused before the machine is planned
    resolved = resolve(deploy_profile, model, weights, fatal=FORCED if force else FATAL_TO_START)
    profile = with_weights(resolved.profile, weights)
    if sampling is not None:
        profile = with_sampling(profile, sampling)
    if not 0 <= replica < len(profile.replicas):
        raise ProfileMismatchError(
            f"the profile has {len(profile.replicas)} replica(s), not {replica + 1}",
            "use --replica 0",
        )
    envs.check({**os.environ, **profile.env})
    # An OMNI_CPU_* variable of a stage's choice wins over its entry (omni_cpu.profile.choices).
    overridden = [
        line
        for stage in profile.replicas[replica].stages
        for line in choices.overrides(stage.choices, stage.stage_id, os.environ)
    ]
    return LaunchPlan(
        model=model,
        profile=profile,
        profile_source=resolved.source,
        replica=replica,
        deploy_config=deploy_config_dict(profile, replica),
        problems=tuple(problem.message for problem in resolved.problems) + tuple(overridden),
    )
