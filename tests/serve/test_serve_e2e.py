"""`omni-cpu serve` end to end: one real server (tiny checkpoint), the official `openai` client.

One server start for the whole module (two engines load on 2 cores: minutes). The
SIGTERM test runs last and stops it; the fixture's teardown stops it otherwise.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import threading
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_cpu.process import proctree
from tests.helpers.engines import run_omni_cpu
from tests.helpers.serving import (
    FRAME_SAMPLES,
    REQUEST_TIMEOUT_S,
    SAMPLE_RATE,
    Server,
    TinyServer,
    get,
    get_status,
    post_json,
    wav_data_url,
)

pytestmark = pytest.mark.e2e

openai = pytest.importorskip("openai")
soundfile = pytest.importorskip("soundfile")

MAX_FRAMES = 24  # random talker weights rarely emit EOS: bound every request
MAX_SEQS = 2
MAX_WAITING = 1  # 3 admitted at once: 8 concurrent requests overflow
SEND_TIMEOUT_S = 5
# The slow-reader test's streams: how many a client tries, and how long each may take to be cut.
ATTEMPTS = 6
ATTEMPT_S = 45


@pytest.fixture(scope="module")
def server(tiny_server: TinyServer) -> Server:
    return tiny_server(
        "custom-voice", MAX_SEQS,
        "--max-frames", str(MAX_FRAMES), "--max-waiting", str(MAX_WAITING),
        "--drain-timeout", "120", "--send-timeout", str(SEND_TIMEOUT_S),
    )  # fmt: skip


def pcm_samples(data: bytes) -> int:
    assert len(data) % 2 == 0
    return len(data) // 2


def streamed_pcm(server: Server, max_new_tokens: int) -> Any:
    """A streamed PCM request through the `openai` client (a context manager: the reply)."""
    return server.client().audio.speech.with_streaming_response.create(
        model=server.model,
        input="Hello there.",
        voice="ryan",
        response_format="pcm",
        extra_body={"stream": True, "stream_format": "audio", "max_new_tokens": max_new_tokens},
    )


def test_a_healthy_start_is_quiet(server: Server):
    lines = server.startup_log.splitlines()
    assert not [line for line in lines if "ERROR" in line or "WARNING" in line], lines
    assert len(lines) <= 10, lines


def test_models_lists_the_checkpoint(server: Server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.model]


def test_wav_speech_decodes_as_24khz_whole_frames(server: Server):
    reply = server.client().audio.speech.create(
        model=server.model, input="Hello there.", voice="ryan", response_format="wav"
    )
    audio, rate = soundfile.read(io.BytesIO(reply.content), dtype="int16")
    assert rate == SAMPLE_RATE
    assert len(audio) > 0 and len(audio) % FRAME_SAMPLES == 0
    assert int(np.abs(audio.astype(np.int32)).max()) > 0  # not silent


def test_a_request_without_max_new_tokens_gets_max_frames_frames_as_run_does(server: Server):
    # Greedy, so the same codes every time; random talker weights do not stop before the cap.
    body = {"model": server.model, "input": "Hello there.", "voice": "ryan",
            "response_format": "pcm", "extra_params": {"temperature": 0}}  # fmt: skip
    status, reply = post_json(server.url("/v1/audio/speech"), body)
    assert status == 200, reply[:300]
    assert pcm_samples(reply) == MAX_FRAMES * FRAME_SAMPLES  # run --max-frames gives as many


def test_pcm_speech_is_whole_frames_of_int16(server: Server):
    reply = server.client().audio.speech.create(
        model=server.model,
        input="Hello there.",
        voice="ryan",
        response_format="pcm",
        extra_body={"max_new_tokens": 12},
    )
    samples = pcm_samples(reply.content)
    assert samples > 0 and samples % FRAME_SAMPLES == 0


def test_streamed_pcm_arrives_as_whole_frames(server: Server):
    with streamed_pcm(server, max_new_tokens=20) as reply:
        assert reply.status_code == 200
        data = b"".join(reply.iter_bytes())
    samples = pcm_samples(data)
    assert samples > 0 and samples % FRAME_SAMPLES == 0


def test_unknown_voice_is_400_listing_the_voices(server: Server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().audio.speech.create(model=server.model, input="Hi.", voice="nobody")
    assert "ryan" in str(caught.value) and "vivian" in str(caught.value)


def test_reference_audio_for_a_custom_voice_model_is_400(server: Server):
    status, body = post_json(
        server.url("/v1/audio/speech"),
        {"model": server.model, "input": "Hi.", "ref_audio": wav_data_url(2.0), "ref_text": "x"},
    )
    assert status == 400 and "Base" in json.loads(body)["error"]["message"]


def test_empty_input_is_400(server: Server):
    status, body = post_json(
        server.url("/v1/audio/speech"), {"model": server.model, "input": " ", "voice": "ryan"}
    )
    assert status == 400
    assert "empty" in json.loads(body)["error"]["message"]


def test_over_long_input_is_400(server: Server):
    body = {"model": server.model, "input": "word " * 5000, "voice": "ryan"}
    status, reply = post_json(server.url("/v1/audio/speech"), body)
    assert status == 400
    assert json.loads(reply)["error"]["param"] == "input"


def test_unsupported_format_is_400(server: Server):
    body = {"model": server.model, "input": "Hi.", "voice": "ryan", "response_format": "ogg"}
    status, reply = post_json(server.url("/v1/audio/speech"), body)
    assert status == 400
    assert "response_format" in json.loads(reply)["error"]["message"]


def test_eight_concurrent_requests_succeed_or_get_429(server: Server):
    body = {
        "model": server.model,
        "input": "Hello there.",
        "voice": "ryan",
        "response_format": "pcm",
    }
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post_json, server.url("/v1/audio/speech"), body) for _ in range(8)]
        results = [future.result(timeout=REQUEST_TIMEOUT_S + 10) for future in futures]
    statuses = [status for status, _ in results]
    assert set(statuses) <= {200, 429}
    assert 200 in statuses
    for status, data in results:
        if status == 200:
            assert pcm_samples(data) % FRAME_SAMPLES == 0
        else:
            assert json.loads(data)["error"]["code"] == 429


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_streamed_reply_is_timed_on_metrics_as_a_listener_hears_it(server: Server):
    before = get(server.url("/metrics"))[1]
    with streamed_pcm(server, max_new_tokens=20) as reply:
        assert reply.status_code == 200
        b"".join(reply.iter_bytes())
    after = get(server.url("/metrics"))[1]
    names = ("first_audio", "safe_start", "stall")
    counts = {n: _metric(after, f"omni_cpu_stream_{n}_seconds_count") for n in names}
    assert all(
        counts[n] == _metric(before, f"omni_cpu_stream_{n}_seconds_count") + 1 for n in names
    )
    added = {
        n: _metric(after, f"omni_cpu_stream_{n}_seconds_sum")
        - _metric(before, f"omni_cpu_stream_{n}_seconds_sum")
        for n in names
    }
    # One stream's safe start is never before its first audio; read back as the difference of
    # two running sums, each figure carries the sums' float rounding (~1e-16 of their size).
    assert 0 < added["first_audio"] <= added["safe_start"] + 1e-9


def speech_pcm(server: Server, **fields: Any) -> bytes:
    """12 frames of PCM for `fields` over a plain speech request (200 asserted)."""
    body = {"model": server.model, "input": "Hello there.", "voice": "ryan",
            "response_format": "pcm", "max_new_tokens": 12, **fields}  # fmt: skip
    status, reply = post_json(server.url("/v1/audio/speech"), body)
    assert status == 200, reply[:300]
    assert pcm_samples(reply) > 0
    return reply


def test_a_seeded_request_gives_the_same_audio_twice_and_another_seed_other_audio(
    server: Server,
):
    # The profile samples (temperature 0.9, top-k 50): the seed is what repeats the audio.
    first = speech_pcm(server, seed=7)
    assert speech_pcm(server, seed=7) == first
    assert speech_pcm(server, seed=8) != first
    own = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.2}
    tuned = speech_pcm(server, seed=7, extra_params=own)
    assert speech_pcm(server, seed=7, extra_params=own) == tuned != first


def test_a_seeded_request_gives_the_audio_run_gives_with_that_seed(server: Server, tmp_path: Path):
    # The fixture planned the profile beside the checkpoint; run takes the same one.
    model = Path(server.model)
    out = tmp_path / "run.wav"
    run = run_omni_cpu(
        "run", "--model", str(model), "--deploy-profile", str(model.parent / "deploy.yaml"),
        "--text", "Hello there.", "--speaker", "ryan", "--seed", "7", "--max-frames", "12",
        "--out", str(out),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    with wave.open(str(out), "rb") as written:
        ran = written.readframes(written.getnframes())
    # max_new_tokens is the talker's token budget: N frames take N + 1 (docs/sampling.md).
    assert speech_pcm(server, seed=7, max_new_tokens=13) == ran
    assert len(ran) == 12 * FRAME_SAMPLES * 2


def test_a_requests_temperature_0_makes_both_samplers_greedy(server: Server):
    # No seed: two replies are the same only if the talker and the code predictor both take
    # the argmax (vLLM-Omni 0.30.0 alone gives the temperature to the talker only).
    greedy = {"extra_params": {"temperature": 0}}
    assert speech_pcm(server, **greedy) == speech_pcm(server, **greedy)


def test_a_sampling_value_out_of_range_is_400_naming_the_field(server: Server):
    for fields, param in (
        ({"seed": -1}, "seed"),
        ({"extra_params": {"temperature": -1}}, "extra_params.temperature"),
        ({"extra_params": {"repetition_penalty": 0}}, "extra_params.repetition_penalty"),
    ):
        body = {"model": server.model, "input": "Hi.", "voice": "ryan", **fields}
        status, reply = post_json(server.url("/v1/audio/speech"), body)
        assert status == 400, reply[:300]
        assert json.loads(reply)["error"]["param"] == param


def test_metrics_and_health_are_served(server: Server):
    assert get(server.url("/health"))[0] == 200
    status, text = get(server.url("/metrics"))
    assert status == 200
    assert "omni_cpu_speech_requests_in_flight 0.0" in text


def stage_processes(pids: list[int]) -> list[int]:
    names = {pid: proctree.command_line(pid) for pid in pids}
    return [pid for pid, name in names.items() if "StageEngineCoreProc" in name or "Worker" in name]


def _served_metric(server: Server, name: str) -> float:
    return _metric(get(server.url("/metrics"))[1], name)


def _engine_metric(server: Server, name: str, labels: str = "") -> float:
    """A vLLM-Omni metric summed over its label sets that hold `labels` (its orchestrator's)."""
    text = get(server.url("/metrics"))[1]
    found = re.findall(rf"^{re.escape(name)}\{{([^}}]*)\}} ([0-9.e+-]+)$", text, re.M)
    return sum(float(value) for held, value in found if labels in held)


def _engine_running(server: Server) -> float:
    return _engine_metric(server, "vllm_omni:num_requests_running")


def _engine_aborted(server: Server) -> tuple[float, float]:
    """(requests vLLM-Omni counts failed, speech streams whose generator it saw closed)."""
    return (
        _engine_metric(server, "vllm_omni:requests_success_total", 'finished_reason="abort"'),
        _engine_metric(server, "vllm_omni:speech_stream_aborted_total"),
    )


def assert_engine_let_go(server: Server, aborted_before: tuple[float, float]) -> None:
    """The cut stream's generator was closed and the engine no longer counts its request.

    Closing vLLM-Omni's stream generator is what tells its engine to abort. Its
    orchestrator counts a request running from its dispatch to a stage until it
    finishes or the stages are told to abort it: a cut request the engine was never
    told about stays counted while it generates. (vLLM's per-stage
    `vllm:num_requests_running` cannot tell: the talker's stays at 1 after every request.)
    """
    # vLLM-Omni's abort returns once its stages are told, before the place comes back.
    assert _engine_running(server) == 0, server.log_tail()
    failed, closed = aborted_before
    assert _engine_aborted(server) == (failed + 1, closed + 1)
    speech_pcm(server)  # the next request is served alone
    assert _engine_running(server) == 0


def test_a_client_that_stops_reading_is_cut_and_its_place_returned(server: Server):
    cut = 'omni_cpu_speech_requests_rejected_total{reason="slow_reader"}'
    before = _served_metric(server, cut)
    aborted = _engine_aborted(server)
    body = json.dumps(
        {"model": server.model, "input": "Hello there.", "voice": "ryan", "stream": True,
         "response_format": "pcm", "stream_format": "audio", "max_new_tokens": 1500}
    ).encode()  # fmt: skip
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    # Random weights may emit end-of-speech early (a third of the streams here, before 1,500
    # frames): a stream that ends that soon fits in the sockets' buffers and is never cut, so
    # the client tries again, up to ATTEMPTS streams, each given the time 1,500 frames take.
    for _ in range(ATTEMPTS):
        with socket.socket() as reader:
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
            reader.connect(("127.0.0.1", server.port))
            reader.sendall(
                b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            attempt_ends = min(deadline, time.monotonic() + ATTEMPT_S)
            while _served_metric(server, cut) <= before and time.monotonic() < attempt_ends:
                time.sleep(0.5)  # the client reads nothing
        if _served_metric(server, cut) > before:
            break
    assert _served_metric(server, cut) == before + 1, server.log_tail()
    while (
        _served_metric(server, "omni_cpu_speech_requests_in_flight") and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert _served_metric(server, "omni_cpu_speech_requests_in_flight") == 0
    assert get_status(server.url("/health")) == 200
    assert_engine_let_go(server, aborted)


def test_a_stream_cut_at_its_deadline_is_aborted_in_the_engine(server: Server):
    cut = 'omni_cpu_speech_requests_rejected_total{reason="timeout"}'
    before = _served_metric(server, cut)
    aborted = _engine_aborted(server)
    body = {"model": server.model, "input": "Hello there.", "voice": "ryan", "stream": True,
            "response_format": "pcm", "stream_format": "audio", "max_new_tokens": 1500,
            "timeout": 0.5}  # fmt: skip
    # The deadline must come before the request's MAX_FRAMES frames can: on the tiny
    # checkpoint they take about a second, and 3 s let a fast machine finish first.
    status, _ = post_json(server.url("/v1/audio/speech"), body)
    # 200: the audio so far, ended cleanly; 504: none had come yet (a busy machine)
    assert status in (200, 504)
    assert _served_metric(server, cut) == before + 1
    assert_engine_let_go(server, aborted)


def test_a_client_that_leaves_mid_stream_is_aborted_in_the_engine(server: Server):
    aborted = _engine_aborted(server)
    body = json.dumps(
        {"model": server.model, "input": "Hello there.", "voice": "ryan", "stream": True,
         "response_format": "pcm", "stream_format": "audio", "max_new_tokens": 1500}
    ).encode()  # fmt: skip
    with socket.socket() as client:
        client.connect(("127.0.0.1", server.port))
        client.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert client.recv(4096).startswith(b"HTTP/1.1 200")  # the stream is under way
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while (
        _served_metric(server, "omni_cpu_speech_requests_in_flight") and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert_engine_let_go(server, aborted)


def test_sigterm_drains_in_flight_requests_and_leaves_no_stage_process(server: Server):
    """Runs last: it stops the module's server."""
    tree = proctree.descendants(server.process.pid)
    assert len(stage_processes(tree)) >= 2  # engine cores / workers of both stages
    streamed = bytearray()
    first_chunk = threading.Event()
    outcome: dict[str, object] = {}

    def long_request() -> None:
        try:
            with streamed_pcm(server, max_new_tokens=120) as reply:
                outcome["status"] = reply.status_code
                for chunk in reply.iter_bytes():
                    streamed.extend(chunk)
                    first_chunk.set()
        except Exception as error:  # reported below, not swallowed
            outcome["error"] = error
        finally:
            first_chunk.set()

    worker = threading.Thread(target=long_request)
    worker.start()
    assert first_chunk.wait(REQUEST_TIMEOUT_S)
    os.kill(server.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while get_status(server.url("/health")) != 503 and time.monotonic() < deadline:
        time.sleep(0.2)
    late = {"model": server.model, "input": "Too late.", "voice": "ryan"}
    assert post_json(server.url("/v1/audio/speech"), late, 30)[0] == 503
    worker.join(REQUEST_TIMEOUT_S)
    assert not worker.is_alive()
    assert "error" not in outcome, outcome
    assert outcome["status"] == 200
    assert len(streamed) > 0 and pcm_samples(bytes(streamed)) % FRAME_SAMPLES == 0
    assert server.process.wait(timeout=180) == 0
    # The watchdog (one of the tree) sweeps last, within seconds of the server's exit.
    assert proctree.wait_gone(tree, 5.0) == []
