"""A run's own sampling over the profile's: the profile keeps the defaults, options override.

The talker stage's sampling lives in its profile settings (vLLM-Omni's stage keys):
`default_sampling_params` for the talker's layer-0 code (vLLM's `SamplingParams`) and
`subtalker_sampling_params` for the code predictor's 15 residual codes. `Sampling`
overrides both the way qwen-tts 0.1.1's `generate_*` keywords do: temperature, top-k and
top-p apply to the talker and the code predictor alike, the repetition penalty to the
talker only, `greedy` makes both take the argmax. A seed goes to the talker's
`SamplingParams.seed` and, as vLLM-Omni 0.30.0's runner reads it, to
`extra_args.tts_local_seed`, which seeds the code predictor's generator for the request.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from omni_cpu.errors import InputError
from omni_cpu.profile.deploy import default_stage_settings
from omni_cpu.profile.model import Profile

TALKER_STAGE = 0
TALKER_KEY = "default_sampling_params"
PREDICTOR_KEY = "subtalker_sampling_params"
SEED_EXTRA_ARG = "tts_local_seed"  # vllm_omni/worker/gpu_model_runner.py (0.30.0)


@dataclass(frozen=True)
class Sampling:
    """What a run asks of the sampler; None leaves the profile's value."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    greedy: bool = False
    seed: int | None = None

    def check(self) -> Sampling:
        """Itself, or an InputError naming the first option out of range."""
        if self.temperature is not None and not (
            math.isfinite(self.temperature) and self.temperature >= 0
        ):
            raise _bad("--temperature", self.temperature, "a number >= 0 (0 is greedy)")
        if self.top_k is not None and self.top_k < 1 and self.top_k != -1:
            raise _bad("--top-k", self.top_k, "an integer >= 1, or -1 for no limit")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise _bad("--top-p", self.top_p, "a number in (0, 1]")
        if self.repetition_penalty is not None and not (
            math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0
        ):
            raise _bad("--repetition-penalty", self.repetition_penalty, "a number > 0 (1 is off)")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise _bad("--seed", self.seed, "an integer >= 0")
        if self.greedy and self.temperature not in (None, 0):
            raise InputError(
                f"--greedy with --temperature {self.temperature}",
                "give one of them: --greedy is temperature 0",
            )
        return self

    def is_default(self) -> bool:
        return self == Sampling()

    def talker(self, params: dict[str, Any]) -> dict[str, Any]:
        """The talker's `default_sampling_params` with this run's values over `params`."""
        out = copy.deepcopy(params)
        for key, value in (
            ("temperature", 0.0 if self.greedy else self.temperature),
            ("top_k", self.top_k),
            ("top_p", self.top_p),
            ("repetition_penalty", self.repetition_penalty),
            ("seed", self.seed),
        ):
            if value is not None:
                out[key] = value
        if self.seed is not None:
            out["extra_args"] = {**out.get("extra_args", {}), SEED_EXTRA_ARG: self.seed}
        return out

    def predictor(self, params: dict[str, Any]) -> dict[str, Any]:
        """The code predictor's `subtalker_sampling_params` with this run's values over `params`."""
        out = copy.deepcopy(params)
        greedy = self.greedy or self.temperature == 0
        if greedy:
            out["do_sample"] = False
        elif self.temperature is not None:
            out.update(do_sample=True, temperature=self.temperature)
        for key, value in (("top_k", self.top_k), ("top_p", self.top_p)):
            if value is not None:
                out[key] = value
        return out


def _bad(option: str, value: object, want: str) -> InputError:
    return InputError(f"{option} {value} is out of range", f"give {want}")


def with_sampling(profile: Profile, sampling: Sampling) -> Profile:
    """`profile` whose talker stage samples as `sampling` says (every replica)."""
    if sampling.check().is_default():
        return profile
    defaults = default_stage_settings(TALKER_STAGE)
    replicas = []
    for replica in profile.replicas:
        stages = []
        for stage in replica.stages:
            if stage.stage_id == TALKER_STAGE:
                settings = dict(stage.settings)
                settings[TALKER_KEY] = sampling.talker(
                    settings.get(TALKER_KEY, defaults[TALKER_KEY])
                )
                settings[PREDICTOR_KEY] = sampling.predictor(
                    settings.get(PREDICTOR_KEY, defaults[PREDICTOR_KEY])
                )
                stage = dataclasses.replace(stage, settings=settings)
            stages.append(stage)
        replicas.append(dataclasses.replace(replica, stages=tuple(stages)))
    return dataclasses.replace(profile, replicas=tuple(replicas))
