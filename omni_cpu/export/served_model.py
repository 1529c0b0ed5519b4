"""Which model a profile's pods serve: the published model of the size and kind it was planned for.

A profile's memory, KV bytes and batch were sized for one model; a pod serving another
would run out of memory or refuse its requests. So the pods serve the profile's own
model (its Hugging Face id), and a `--model` the profile was not planned for is refused.
"""

from __future__ import annotations

from omni_cpu.checkpoint.configs import KIND_TABLE, PUBLISHED
from omni_cpu.errors import InputError, ModelError
from omni_cpu.plan.footprint import ModelFootprint, footprint_for_model
from omni_cpu.profile.model import Profile

HUB_SIZES = ("0.6b", "1.7b")
TASK_OF_KIND = {kind: task for kind, _, task in KIND_TABLE}


def hub_id(size: str, kind: str) -> str:
    """Qwen's id of a published size and kind: Qwen/Qwen3-TTS-12Hz-1.7B-Base, ..."""
    return f"Qwen/Qwen3-TTS-12Hz-{size.upper()}-{TASK_OF_KIND[kind]}"


def published_size(footprint: ModelFootprint) -> str | None:
    """The published size with this footprint's talker ("0.6b", "1.7b"); None for others."""
    for size in HUB_SIZES:
        if footprint_for_model(size).talker_params == footprint.talker_params:
            return size
    return None


def _describe(footprint: ModelFootprint, kind: str) -> str:
    size = published_size(footprint)
    return f"a {size.upper() if size else footprint.name} {kind} model"


def _checkable(model: str) -> ModelFootprint | None:
    """The footprint a model's name or local folder states; None where it states none."""
    try:
        return footprint_for_model(model)
    except ModelError:
        return None  # a folder inside the pod whose name says no size: nothing to contradict


def served_model(profile: Profile, model: str | None) -> str:
    """The model the pods serve: `model` where it fits the profile, else the profile's own."""
    planned = _checkable(profile.model)
    kind = profile.model_kind or (planned.kind if planned is not None else "")
    if model is None:
        size = published_size(planned) if planned is not None else None
        if size is None or (kind, size) not in PUBLISHED:
            raise InputError(
                f"the profile was planned for {profile.model!r}, which has no published model id",
                "pass the pods' model with --model (a Hugging Face id or a folder in the pod)",
            )
        return hub_id(size, kind)
    given = _checkable(model)
    if given is None or planned is None:
        return model
    size_differs = given.talker_params != planned.talker_params
    if size_differs or (kind and given.kind != kind):
        raise InputError(
            f"--model {model} is {_describe(given, given.kind)} but the profile was planned "
            f"for {_describe(planned, kind)} ({profile.model})",
            "drop --model to serve the profile's own model, or plan one for it "
            f"(omni-cpu probe --model {model} --output FILE)",
        )
    return model
