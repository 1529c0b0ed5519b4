"""A speech request's own sampling reaches the talker stage's two samplers.

vLLM-Omni 0.30.0's speech route leaves a request's `extra_params` in the talker's
`SamplingParams.extra_args`; these are the parts it does not carry on itself: the
repetition penalty to the talker, temperature/top-k/top-p to the code predictor.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")

from vllm import SamplingParams

from omni_cpu.platform.request_sampling import apply_repetition_penalty, predictor_params

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

STAGE = {"do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0}


def speech_params(**extra_params: object) -> SamplingParams:
    """The talker's SamplingParams as vLLM-Omni's speech route leaves them for this request."""
    params = SamplingParams(temperature=0.9, top_k=50, repetition_penalty=1.05)
    params.extra_args = dict(extra_params)
    return params


def test_without_extra_params_the_stage_sampling_stands() -> None:
    assert predictor_params(STAGE, speech_params()) == STAGE
    assert predictor_params(STAGE, None) == STAGE


def test_a_requests_temperature_top_k_and_top_p_reach_the_code_predictor() -> None:
    params = speech_params(temperature=0.5, top_k=7, top_p=0.8, tts_local_seed=3)
    assert predictor_params(STAGE, params) == {
        "do_sample": True,
        "temperature": 0.5,
        "top_k": 7,
        "top_p": 0.8,
    }


def test_temperature_0_makes_the_code_predictor_greedy() -> None:
    assert predictor_params(STAGE, speech_params(temperature=0))["do_sample"] is False


def test_a_requests_repetition_penalty_reaches_the_talker() -> None:
    params = speech_params(repetition_penalty=1.3)
    apply_repetition_penalty(params)
    assert params.repetition_penalty == 1.3


def test_without_one_the_profiles_repetition_penalty_stands() -> None:
    params = speech_params(temperature=0.5)
    apply_repetition_penalty(params)
    assert params.repetition_penalty == 1.05
