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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omni_cpu.errors import InputError
from omni_cpu.profile.deploy import default_stage_settings
from omni_cpu.profile.model import TALKER_STAGE, Profile

TALKER_KEY = "default_sampling_params"
PREDICTOR_KEY = "subtalker_sampling_params"
SEED_EXTRA_ARG = "tts_local_seed"  # vllm_omni/worker/gpu_model_runner.py (0.30.0)


def _number(value: Any) -> float | None:
    """`value` as a finite float, None when it is not a finite number (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# What each sampling value takes, for run's options and serve's per-request values alike:
# vLLM 0.30.0's `SamplingParams._verify_args` bounds (temperature at most 2, top-k 0 or
# -1 for none), so a value the talker would fail on is refused where the user gave it.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (
        lambda v: (n := _number(v)) is not None and 0 <= n <= 2,
        "a number from 0 (greedy) to 2",
    ),
    "top_k": (
        lambda v: _whole(v) and v >= -1,
        "a whole number: 1 or more, or 0 or -1 for no limit",
    ),
    "top_p": (
        lambda v: (n := _number(v)) is not None and 0 < n <= 1,
        "a number above 0, at most 1",
    ),
    "repetition_penalty": (
        lambda v: (n := _number(v)) is not None and n > 0,
        "a number above 0 (1 is off)",
    ),
}
SEED_RULE: tuple[Callable[[Any], bool], str] = (
    lambda v: _whole(v) and 0 <= v < 2**63,
    "a whole number from 0 to 2**63 - 1",
)


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
        for name, (takes, want) in (*RULES.items(), ("seed", SEED_RULE)):
            value = getattr(self, name)
            if value is not None and not takes(value):
                raise _bad("--" + name.replace("_", "-"), value, want)
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


def request_sampling(extra_args: Mapping[str, Any] | None) -> Sampling:
    """The sampling a speech request's `extra_params` asks for (None: the profile's).

    vLLM-Omni 0.30.0 copies `extra_params` whole into the talker's `extra_args`; a value
    no rule takes is left out here (serve's door has refused it already).
    """
    if not isinstance(extra_args, Mapping):
        return Sampling()
    taken = {
        name: extra_args[name]
        for name, (takes, _) in RULES.items()
        if extra_args.get(name) is not None and takes(extra_args[name])
    }
    return Sampling(**taken)
