"""An added request the engine core cannot decode fails alone (omni_cpu.platform.request_errors).

vLLM's own codec and request class on both sides, decoded in a thread that flushes subnormal
floats to zero as a stage does; the engine core's loop itself is tested end to end
(tests/e2e/test_bad_request_run.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch
from vllm import SamplingParams
from vllm.v1.engine import EngineCoreRequest, core
from vllm.v1.serial_utils import MsgpackEncoder

from omni_cpu.platform import request_errors


@pytest.fixture
def installed() -> Iterator[None]:
    request_errors.install()
    yield
    request_errors.uninstall()


def request(top_p: float, client_index: int = 0) -> EngineCoreRequest:
    params = SamplingParams()
    params.top_p = top_p  # as vLLM-Omni's speech route sets it: unchecked
    return EngineCoreRequest(
        request_id="speech-7",
        prompt_token_ids=[1, 2, 3],
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        client_index=client_index,
    )


def decode_as_the_engine_core(frames: Any) -> Any:
    """What the input thread's decoder returns or raises, denormals flushed as in a stage."""
    out: list[Any] = []

    def thread() -> None:
        torch.set_flush_denormal(True)
        try:
            out.append(core.MsgpackDecoder(EngineCoreRequest).decode(frames))
        except Exception as exc:
            out.append(exc)

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    return out[0]


def test_vllms_own_decoder_raises_on_a_subnormal_top_p() -> None:
    # What killed the input thread: the seam below exists because this raises.
    frames = MsgpackEncoder().encode(request(1e-310))
    assert isinstance(decode_as_the_engine_core(frames), Exception)


def test_an_undecodable_request_becomes_a_stand_in_with_its_id_and_client(installed) -> None:
    frames = MsgpackEncoder().encode(request(1e-310, client_index=3))
    got = decode_as_the_engine_core(frames)
    assert isinstance(got, request_errors.UndecodableRequest)
    assert (got.request_id, got.client_index) == ("speech-7", 3)
    with pytest.raises(ValueError, match="speech-7 could not be decoded: top_p"):
        _ = got.sampling_params  # preprocessing fails inside vLLM's per-request try


def test_a_good_request_decodes_as_before(installed) -> None:
    got = decode_as_the_engine_core(MsgpackEncoder().encode(request(0.9)))
    assert isinstance(got, EngineCoreRequest) and got.sampling_params.top_p == 0.9


def test_frames_that_are_not_a_request_still_raise(installed) -> None:
    assert isinstance(decode_as_the_engine_core([b"\xc1"]), Exception)
    generic = core.MsgpackDecoder()  # aborts and utility calls: untyped, decoded as before
    assert generic.decode(MsgpackEncoder().encode(["a", 1])) == ["a", 1]
