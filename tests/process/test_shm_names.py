"""The /dev/shm sweep knows the connector's names as vLLM and vLLM-Omni make them.

The ids come from their own functions (vLLM's `random_uuid` and `assign_request_id`, the
speech route's `speech-` prefix), the keys as vLLM-Omni's connector forms them; a stage fault
left `shm_speech-<16 hex>-<8 hex>_0_{0..4}_lockfile.lock` behind while the pattern wanted a
32-hex uuid.
"""

from __future__ import annotations

import uuid

import pytest

from omni_cpu.process.shm import CONNECTOR

pytest.importorskip("vllm")


def server_request_id() -> str:
    """A speech request's id as the engine core sees it: the route's, then vLLM's suffix."""
    from vllm import SamplingParams
    from vllm.utils import random_uuid
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.input_processor import InputProcessor

    request = EngineCoreRequest(
        request_id=f"speech-{random_uuid()}",  # vllm_omni serving_speech.py (0.30.0)
        prompt_token_ids=[1],
        mm_features=None,
        sampling_params=SamplingParams(),
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )
    InputProcessor.assign_request_id(request)
    return request.request_id


@pytest.mark.parametrize("request_id", [server_request_id, lambda: f"0_{uuid.uuid4()}"])
def test_a_connector_segment_and_its_lock_file_are_recognised(request_id) -> None:
    key = f"{request_id()}_0_3"  # f"{request_id}_{stage_id}_{chunk_id}"
    assert CONNECTOR.match(key)
    assert CONNECTOR.match(f"shm_{key}_lockfile.lock")


def test_names_without_a_request_id_are_not_the_connectors() -> None:
    for name in ("psm_1a2b3c4d", "sem.mp-abc", "shm_notes_0_1", "omni-cpu-run-x.json"):
        assert not CONNECTOR.match(name)
