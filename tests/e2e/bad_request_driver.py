"""Run by tests/e2e/test_bad_request_run.py in a fresh interpreter: a session's stages fork from
the process that starts them, which must not be a pytest worker (its pipes are pytest-xdist's).

argv: CHECKPOINT FRAMES. Prints `first: <error line>` for a request the talker's engine refuses
and `second: <samples>` for the one after it.
"""

from __future__ import annotations

import sys

from omni_cpu.errors import StageError
from omni_cpu.launch import pipeline
from omni_cpu.launch.pipeline import PipelineSession
from omni_cpu.launch.plan import make_launch_plan
from omni_cpu.speech.request import SpeechRequest


def main(checkpoint: str, frames: int) -> None:
    own = pipeline._sampling_params

    def subnormal_top_p(omni: object, requests: list, stream: bool) -> list:
        params = own(omni, requests, stream)
        params[0].top_p = 1e-310  # as vLLM-Omni's speech route copies extra_params.top_p
        return params

    request = SpeechRequest(text="Hello there.", speaker="ryan", max_frames=frames)
    samples: list[int] = []
    with PipelineSession(make_launch_plan(checkpoint)) as session:
        pipeline._sampling_params = subnormal_top_p
        try:
            session.generate([request], stream=True, on_chunk=lambda *_: None)
            print("first: spoke", flush=True)
        except StageError as error:
            print(f"first: {error.one_line()}", flush=True)
        pipeline._sampling_params = own
        session.generate(
            [request], stream=True, on_chunk=lambda _, audio, __: samples.append(audio.size)
        )
    print(f"second: {sum(samples)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
