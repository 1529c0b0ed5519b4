"""Load test for `omni-cpu serve`: requests/s and p50/p95 latency at 1 and 4 concurrent clients.

Starts `omni-cpu serve` on 127.0.0.1 (or uses --url), sends bounded requests
(`max_new_tokens` frames each: random weights rarely emit EOS) with the official
`openai` client, and writes benchmarks/serve-results.json.

    .venv/bin/python benchmarks/serve_load.py --model checkpoints/0.6b --frames 25 \\
        --requests-per-client 6:1,3:4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRAME_SAMPLES = 1920
SAMPLE_RATE = 24_000
TEXT = "Hello there. This is a test of speech synthesis on a CPU server."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes] | None, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as reply:
                if reply.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit("server did not become ready")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def one_request(client, model: str, frames: int) -> dict[str, float]:
    start = time.perf_counter()
    first: float | None = None
    size = 0
    with client.audio.speech.with_streaming_response.create(
        model=model,
        input=TEXT,
        voice="ryan",
        response_format="pcm",
        extra_body={"stream": True, "stream_format": "audio", "max_new_tokens": frames},
    ) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"status {reply.status_code}")
        for chunk in reply.iter_bytes():
            if first is None and chunk:
                first = time.perf_counter() - start
            size += len(chunk)
    latency = time.perf_counter() - start
    samples = size // 2
    return {
        "latency_s": latency,
        "first_audio_s": first if first is not None else latency,
        "audio_s": samples / SAMPLE_RATE,
        "whole_frames": float(samples % FRAME_SAMPLES == 0),
    }


def run_level(client, model: str, frames: int, clients: int, per_client: int) -> dict:
    def worker(_: int) -> list[dict[str, float]]:
        return [one_request(client, model, frames) for _ in range(per_client)]

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for batch in pool.map(worker, range(clients)) for r in batch]
    wall = time.perf_counter() - start
    latencies = [r["latency_s"] for r in results]
    firsts = [r["first_audio_s"] for r in results]
    audio = sum(r["audio_s"] for r in results)
    return {
        "clients": clients,
        "requests": len(results),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 3),
        "latency_p50_s": round(statistics.median(latencies), 2),
        "latency_p95_s": round(percentile(latencies, 0.95), 2),
        "first_audio_p50_s": round(statistics.median(firsts), 2),
        "first_audio_p95_s": round(percentile(firsts, 0.95), 2),
        "audio_s_per_request": round(audio / len(results), 2),
        "audio_s_per_wall_s": round(audio / wall, 3),
        "all_whole_frames": all(r["whole_frames"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="checkpoints/0.6b")
    parser.add_argument("--url", help="Use this running server instead of starting one.")
    parser.add_argument("--frames", type=int, default=25, help="max_new_tokens per request")
    parser.add_argument(
        "--requests-per-client",
        default="6:1,3:4",
        help="per-client requests:clients pairs, comma separated",
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "serve-results.json"))
    args = parser.parse_args()

    import openai

    process = None
    url = args.url
    startup_s = None
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable, "-m", "omni_cpu.cli", "serve", "--model", args.model,
            "--port", str(port), "--max-frames", str(args.frames),
        ]  # fmt: skip
        process = subprocess.Popen(command, cwd=REPO)
    try:
        startup_s = wait_ready(url, process, 1800)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=900)
        model = client.models.list().data[0].id
        one_request(client, model, args.frames)  # warm-up: the first request is slow
        levels = []
        for pair in args.requests_per_client.split(","):
            per_client, clients = (int(x) for x in pair.split(":"))
            level = run_level(client, model, args.frames, clients, per_client)
            print(json.dumps(level), flush=True)
            levels.append(level)
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=300)
    result = {
        "what": "omni-cpu serve, /v1/audio/speech streaming pcm, openai client",
        "model": args.model,
        "frames_per_request": args.frames,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_after": os.getloadavg(),
        "startup_s": round(startup_s, 1) if startup_s is not None else None,
        "command": " ".join(sys.argv),
        "levels": levels,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
