"""Reference audio URLs: fetched by admission from allowed hosts only, within deadlines.

A real HTTP server on loopback plays the reference's host. Loopback is private, so it
is fetched from only when listed; what it serves (audio, text, redirects, nothing at
all) decides the answer, which names the host. The engine never sees the URL.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from omni_cpu import envs
from omni_cpu.errors import SettingError
from omni_cpu.serve.knobs import AdmissionLimits
from tests.helpers.serving import wav_data_url

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission
from tests.serve.test_admission import SlowApp, call, run

WAV = base64.b64decode(wav_data_url(2.0).partition(",")[2])
CLONE = {"model": "m", "input": "Hello there.", "task_type": "Base", "ref_text": "A clip."}


class Host(http.server.BaseHTTPRequestHandler):
    """Serves /voice.wav (audio), /words.txt (text) and /go?to=URL (a redirect)."""

    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Host.hits.append(self.path)
        if self.path.startswith("/go?to="):
            self.send_response(302)
            self.send_header("Location", self.path.partition("=")[2])
            self.end_headers()
            return
        audio = self.path == "/voice.wav"
        data = WAV if audio else b"hello"
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav" if audio else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    Host.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Host)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def silent_host() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


def speak(url: str, allow: str, fetch_s: float = 5.0) -> tuple[int, dict, SlowApp]:
    inner = SlowApp(released=True)
    limits = AdmissionLimits(allow_ref_audio_urls=allow, ref_audio_fetch_s=fetch_s)
    status, raw = run(
        call(SpeechAdmission(inner, limits), "/v1/audio/speech", {**CLONE, "ref_audio": url})
    )
    return status, json.loads(raw) if status != 200 else {}, inner


def test_a_listed_host_is_fetched_and_the_engine_gets_the_audio_not_the_url(port: int):
    status, _, inner = speak(f"http://127.0.0.1:{port}/voice.wav", "127.0.0.1")
    assert status == 200 and Host.hits == ["/voice.wav"]
    sent = json.loads(inner.bodies[0])["ref_audio"]
    assert sent.startswith("data:audio/wav;base64,") and base64.b64decode(sent[22:]) == WAV


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "127.1", "localhost"])
def test_loopback_in_any_spelling_is_refused_unless_listed(port: int, host: str):
    status, reply, inner = speak(f"http://{host}:{port}/voice.wav", "*")
    assert status == 400 and "loopback" in reply["error"]["message"], reply
    assert host in reply["error"]["message"] and Host.hits == [] and inner.started == 0


def test_a_redirect_to_an_unlisted_private_host_is_refused(port: int):
    status, reply, _ = speak(f"http://127.0.0.1:{port}/go?to=http://10.1.2.3/x.wav", "127.0.0.1")
    assert status == 400 and "10.1.2.3" in reply["error"]["message"], reply


def test_a_redirect_to_a_file_url_is_400(port: int):
    status, reply, _ = speak(f"http://127.0.0.1:{port}/go?to=file:///etc/passwd", "127.0.0.1")
    assert status == 400 and "http(s)" in reply["error"]["message"], reply


def test_a_reply_that_is_not_audio_is_400_naming_the_host(port: int):
    status, reply, _ = speak(f"http://127.0.0.1:{port}/words.txt", "127.0.0.0/8")
    assert status == 400 and "127.0.0.1 sent text/plain" in reply["error"]["message"], reply


@pytest.mark.parametrize("url", ["http:/127.0.0.1:9/x.wav", "http://:9/x.wav", "https://[::1"])
def test_a_malformed_url_is_400_before_taking_a_place(url: str):
    status, reply, inner = speak(url, "*")
    assert status == 400 and reply["error"]["param"] == "ref_audio" and inner.started == 0


def test_a_host_that_never_answers_is_504_in_its_deadline_and_holds_no_stage():
    with silent_host() as port:
        inner = SlowApp(released=True)
        limits = AdmissionLimits(allow_ref_audio_urls="127.0.0.1", ref_audio_fetch_s=1.0)
        app = SpeechAdmission(inner, limits)
        body = {**CLONE, "ref_audio": f"http://127.0.0.1:{port}/voice.wav"}
        seen: list[tuple[int, int]] = []

        async def scenario() -> tuple[int, bytes]:
            task = asyncio.create_task(call(app, "/v1/audio/speech", body))
            await asyncio.sleep(0.5)
            seen.append((app.in_flight, app.on_client))
            return await task

        started = time.monotonic()
        status, raw = run(scenario())
    assert status == 504 and "127.0.0.1" in json.loads(raw)["error"]["message"]
    assert time.monotonic() - started < 4
    assert seen == [(1, 1)]  # in flight, but held by no stage: the stall watch ignores it
    assert app.in_flight == 0 and inner.started == 0


def test_an_entry_that_is_no_host_is_one_line():
    with pytest.raises(SettingError) as caught:
        envs.SERVE_ALLOW_REF_AUDIO_URLS.read("example.com, not a host", "--allow-ref-audio-urls")
    assert "--allow-ref-audio-urls" in caught.value.one_line()
    assert (
        envs.SERVE_ALLOW_REF_AUDIO_URLS.read(" Example.com,10.0.0.0/8 ") == "example.com,10.0.0.0/8"
    )


@contextlib.contextmanager
def dripping_host(head: bytes, every_s: float, hops: int = 0) -> Iterator[int]:
    """A host that sends `head`, then one byte every `every_s` for at most 20 s; with `hops`,
    first that many redirects (each after `every_s`) to itself."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = int(listener.getsockname()[1])
    done = threading.Event()

    def serve() -> None:
        served = 0
        while not done.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                client.recv(4096)
                if served < hops:
                    served += 1
                    time.sleep(every_s)
                    target = f"http://127.0.0.1:{port}/voice.wav"
                    with contextlib.suppress(OSError):
                        client.sendall(
                            f"HTTP/1.1 302 Found\r\nLocation: {target}\r\n"
                            "Content-Length: 0\r\n\r\n".encode()
                        )
                    continue
                ends = time.monotonic() + 20
                with contextlib.suppress(OSError):
                    client.sendall(head)
                    while time.monotonic() < ends and not done.is_set():
                        time.sleep(every_s)
                        client.sendall(b"x")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        done.set()
        listener.close()


DRIPS = {
    "headers": (b"HTTP/1.1 200 OK\r\n", "send its reply's headers"),
    "body": (
        b"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nContent-Length: 100000\r\n\r\n",
        "send the audio",
    ),
}


@pytest.mark.parametrize("part", sorted(DRIPS))
def test_a_host_that_drips_is_504_at_the_one_deadline_naming_what_it_had_not_sent(part: str):
    # Each byte comes well within any one read's timeout: only a deadline for the whole
    # fetch cuts it (it held a place for ~315 s before). The drip outlasts the deadline.
    head, words = DRIPS[part]
    with dripping_host(head, every_s=0.2) as port:
        status, reply, inner = speak(f"http://127.0.0.1:{port}/voice.wav", "127.0.0.1", 0.5)
    assert status == 504 and inner.started == 0, reply
    message = reply["error"]["message"]
    assert words in message and "1 s" in message and "in all" in message, message


def test_redirects_share_the_one_deadline():
    # Three hops of 0.6 s each, a 1 s deadline in all: the third hop is past it.
    with dripping_host(b"HTTP/1.1 200 OK\r\n", every_s=0.6, hops=3) as port:
        status, reply, _ = speak(f"http://127.0.0.1:{port}/voice.wav", "127.0.0.1", 0.5)
    assert status == 504 and "in all" in reply["error"]["message"], reply


def test_the_host_header_carries_a_port_that_is_not_the_schemes(port: int):
    seen: list[str] = []
    original = Host.do_GET

    def recording(handler: Host) -> None:
        seen.append(handler.headers["Host"])
        original(handler)

    Host.do_GET = recording  # type: ignore[method-assign]
    try:
        status, _, _ = speak(f"http://127.0.0.1:{port}/voice.wav", "127.0.0.1")
    finally:
        Host.do_GET = original  # type: ignore[method-assign]
    assert status == 200 and seen == [f"127.0.0.1:{port}"]


def test_a_client_that_leaves_during_a_fetch_gets_its_place_back_at_once():
    # The fetch still runs out its deadline, in its thread, but it holds no place: four
    # clients gone from a host that never answers no longer fill the server (it answered 429).
    with silent_host() as port:
        inner = SlowApp(released=True)
        limits = AdmissionLimits(allow_ref_audio_urls="127.0.0.1", ref_audio_fetch_s=5.0)
        app = SpeechAdmission(inner, limits)
        raw = json.dumps({**CLONE, "ref_audio": f"http://127.0.0.1:{port}/voice.wav"}).encode()
        left = asyncio.Event()
        messages = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            pass

        async def scenario() -> tuple[int, int]:
            scope = {"type": "http", "path": "/v1/audio/speech", "method": "POST", "headers": []}
            request = asyncio.create_task(app(scope, receive, send))
            while app.in_flight == 0:
                await asyncio.sleep(0.01)
            held = app.in_flight
            left.set()  # the client goes away while its reference is being fetched
            await asyncio.wait_for(request, 3)  # well before the 10 s fetch deadline
            return held, app.in_flight

        held, after = asyncio.run(scenario())
    assert (held, after) == (1, 0) and inner.started == 0
