"""A speech request's own sampling in the talker stage, where vLLM-Omni stops short of it.

Written against vllm-omni 0.30.0. Its speech route copies a request's
`extra_params.temperature/top_p/top_k` onto the talker's `SamplingParams`, its `seed` onto
`SamplingParams.seed` and `extra_args.tts_local_seed` (the code predictor's generator), and
the whole `extra_params` into `extra_args`; two parts never arrive: the repetition penalty
(not copied) and the code predictor's temperature, top-k and top-p (the runner passes the
stage's `subtalker_sampling_params` to every request). Here both are taken from
`extra_args`, as `omni-cpu run`'s options set them (omni_cpu.profile.sampling): the
temperature, top-k and top-p reach the talker and the code predictor alike, the
repetition penalty the talker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_cpu.profile.sampling import request_sampling


def _extra_args(sampling_params: Any) -> Mapping[str, Any] | None:
    extra = getattr(sampling_params, "extra_args", None)
    return extra if isinstance(extra, Mapping) else None


def apply_repetition_penalty(sampling_params: Any) -> None:
    """Set the talker's repetition penalty from the request's `extra_params`, if it gave one."""
    penalty = request_sampling(_extra_args(sampling_params)).repetition_penalty
    if sampling_params is not None and penalty is not None:
        sampling_params.repetition_penalty = float(penalty)


def predictor_params(stage: Mapping[str, Any] | None, sampling_params: Any) -> dict[str, Any]:
    """The code predictor's sampling for one request: the stage's, under the request's own."""
    base = dict(stage) if isinstance(stage, Mapping) else {}
    return request_sampling(_extra_args(sampling_params)).predictor(base)
