"""The door refuses what the talker's engine core would refuse, by vLLM's own codec and rules.

A request's `extra_params` and `seed` become the talker's `SamplingParams` in the API server
(vLLM-Omni sets them unchecked) and are checked only when the engine core decodes them, in a
process that flushes subnormal floats to zero; a value refused there killed the engine core's
input thread, and the server (top_p 1e-310, top_k 2**64). These tests hold the
door to the engine: every value either gets a 400 naming its field or decodes in an engine-like
thread (vLLM's codec, denormals flushed as the stage flushes them).
"""

from __future__ import annotations

import copy
import json
import struct
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")
pytest.importorskip("prometheus_client")

from omni_cpu.serve.admission import SpeechAdmission
from omni_cpu.serve.knobs import AdmissionLimits
from tests.serve.test_admission import SPEECH, SlowApp, call, run


def speech_status(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The door's answer to `body`, judged where subnormal numbers are numbers, as in the API
    server (this process may flush them, once torch or the kernels ran here: its threads
    inherit that, so the door runs on a thread that turns it off first)."""
    import torch

    answer: list[Any] = []

    def door() -> None:
        torch.set_flush_denormal(False)
        inner = SlowApp(released=True)
        app = SpeechAdmission(inner, AdmissionLimits())
        answer.append((run(call(app, "/v1/audio/speech", body)), inner.started))

    thread = threading.Thread(target=door)
    thread.start()
    thread.join()
    (status, raw), started = answer[0]
    assert (status == 200) == (started == 1)  # a refused body never reaches the server
    return status, (json.loads(raw)["error"] if status != 200 else {})


def engine_decodes(body: dict[str, Any]) -> None:
    """What the talker's engine core does with `body`'s sampling, or the exception it raises.

    vLLM-Omni 0.30.0's speech route (serving_speech.py) on a copy of the stage's params; omni-cpu's
    stage's repetition penalty; then vLLM's codec, decoded in a thread that flushes subnormal
    floats to zero as the stage processes do (torch.set_flush_denormal in omni_cpu.platform).
    """
    import torch
    from vllm import SamplingParams
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    params = copy.deepcopy(SamplingParams())
    extra = body.get("extra_params")
    if extra is not None:
        for name in ("temperature", "top_p", "top_k"):
            if (value := extra.get(name)) is not None:
                setattr(params, name, value)
        params.extra_args = {**(params.extra_args or {}), **extra}
        if extra.get("repetition_penalty") is not None:
            params.repetition_penalty = float(extra["repetition_penalty"])
    if body.get("seed") is not None:
        params.seed = body["seed"]
        params.extra_args = {**(params.extra_args or {}), "tts_local_seed": body["seed"]}
    failed: list[BaseException] = []

    def engine_thread() -> None:
        torch.set_flush_denormal(True)
        try:
            MsgpackDecoder(SamplingParams).decode(MsgpackEncoder().encode(params))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=engine_thread)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def _bits(pattern: int) -> float:
    """A float from its bits: a literal such as 1e-310 is parsed by arithmetic, and reads as 0.0
    in a process that flushes subnormals (one where torch or the kernels ran first)."""
    return struct.unpack("<d", struct.pack("<Q", pattern))[0]


SUBNORMAL = _bits(0x12688B70E62B)  # 1e-310
SMALLEST = _bits(0x1)  # 5e-324


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"extra_params": {"top_p": SUBNORMAL}}, "extra_params.top_p"),
        ({"extra_params": {"top_p": SMALLEST}}, "extra_params.top_p"),
        ({"extra_params": {"top_k": 2**64}}, "extra_params.top_k"),
        ({"extra_params": {"top_k": 10**300}}, "extra_params.top_k"),
        ({"extra_params": {"speaker_hint": {"n": [2**70]}}}, "extra_params"),
    ],
)
def test_what_killed_the_engine_core_is_400_naming_the_field(body, field):
    with pytest.raises(Exception):  # noqa: B017 - the engine's own error, whichever it is
        engine_decodes(body)  # the value did reach and fail the engine's decode before
    status, error = speech_status({**SPEECH, **body})
    assert status == 400 and error["param"] == field, error
    assert field in error["message"] and "engine" in error["message"]


def test_a_subnormal_is_said_to_read_as_zero():
    _, error = speech_status({**SPEECH, "extra_params": {"top_p": SUBNORMAL}})
    assert "1e-310" in error["message"] and "as 0" in error["message"]


# Values a client may put in the sampling fields: subnormals (drawn from a list: hypothesis
# refuses them once torch has set this process to flush them), infinities, NaN, integers past
# 64 bits, booleans, strings, nested values.
LARGEST_SUBNORMAL = _bits(0x000FFFFFFFFFFFFF)
ODD_NUMBERS = [SUBNORMAL, -SMALLEST, LARGEST_SUBNORMAL, float("inf"), float("-inf"), float("nan")]
ODD_NUMBERS += [2**63, 2**64]
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_subnormal=False)
    | st.sampled_from(ODD_NUMBERS)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=5,
)
SAMPLING = st.fixed_dictionaries(
    {},
    optional={
        "temperature": values,
        "top_p": values,
        "top_k": values,
        "repetition_penalty": values,
        "other": values,
    },
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extra=SAMPLING, seed=st.none() | st.sampled_from([0, 7, 2**63 - 1, 2**64, -1]))
def test_no_sampling_value_passes_the_door_that_the_engine_refuses(extra, seed):
    body: dict[str, Any] = {"extra_params": extra}
    if seed is not None:
        body["seed"] = seed
    status, _ = speech_status({**SPEECH, **body})
    assert status in (200, 400)
    if status == 200:
        engine_decodes(body)  # raises: a value reached the engine unvalidated
