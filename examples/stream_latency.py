"""Time to first audio and real-time factor of concurrent streams against a running server.

  omni-cpu serve --model checkpoints/0.6b --port 8000 --max-frames 124 &
  python examples/stream_latency.py --concurrency 1,2,4 --max-new-tokens 50

Each level sends that many streaming requests at once (raw HTTP, no client library)
and prints per-level p50/max TTFA and the audio seconds made per wall second. A server
that has all the streams it carries without a gap answers 429 with Retry-After; the
request then waits that long and tries again (up to --retries times), and the level
says how many waited: their TTFA counts from the first try, as a user's would.
`--dry-run` prints the request it would send and exits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SAMPLE_RATE = 24_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default=None, help="default: the server's first model")
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--text", default="Measuring streaming latency of speech on a CPU.")
    parser.add_argument("--voice", default="ryan")
    parser.add_argument("--max-new-tokens", type=int, default=50, help="codec frames (80 ms)")
    parser.add_argument("--retries", type=int, default=20, help="tries after a 429, each")
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args()


def request_body(args: argparse.Namespace, model: str) -> dict:
    return {
        "model": model,
        "input": args.text,
        "voice": args.voice,
        "response_format": "pcm",
        "stream": True,
        "stream_format": "audio",
        "max_new_tokens": args.max_new_tokens,
    }


def retry_after_s(error: urllib.error.HTTPError) -> float:
    """The server's Retry-After in seconds (1 where it sends none or an HTTP date)."""
    try:
        return max(float(error.headers.get("Retry-After", "1")), 0.0)
    except ValueError:
        return 1.0


def one_stream(url: str, body: dict, retries: int) -> tuple[float, float, int, int]:
    """(TTFA s, wall s, audio bytes, 429s waited out) of one streaming request."""
    request = urllib.request.Request(
        f"{url}/v1/audio/speech", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    first, total, waited = None, 0, 0
    while True:
        try:
            reply = urllib.request.urlopen(request, timeout=600)
        except urllib.error.HTTPError as error:
            if error.code != 429 or waited >= retries:
                said = error.read()[:200].decode(errors="replace")
                raise SystemExit(f"error: the server answered {error.code}: {said}") from None
            waited += 1
            time.sleep(retry_after_s(error))
            continue
        break
    with reply:
        while chunk := reply.read1(65536):
            if first is None:
                first = time.perf_counter() - start
            total += len(chunk)
    return first or 0.0, time.perf_counter() - start, total, waited


def main() -> None:
    args = parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    if args.dry_run:
        print(json.dumps({"levels": levels, "request": request_body(args, "MODEL")}, indent=2))
        return
    with urllib.request.urlopen(f"{args.url}/v1/models", timeout=10) as reply:
        model = args.model or json.load(reply)["data"][0]["id"]
    body = request_body(args, model)
    for level in levels:
        start = time.perf_counter()
        with ThreadPoolExecutor(level) as pool:
            results = list(
                pool.map(lambda _: one_stream(args.url, body, args.retries), range(level))
            )
        wall = time.perf_counter() - start
        ttfas = [ttfa for ttfa, _, _, _ in results]
        audio_s = sum(size for _, _, size, _ in results) / 2 / SAMPLE_RATE
        waited = sum(1 for *_, retried in results if retried)
        queued = f"; {waited} waited for a 429's Retry-After" if waited else ""
        print(
            f"{level} stream(s): TTFA p50 {statistics.median(ttfas):.2f} s, "
            f"max {max(ttfas):.2f} s; {audio_s / wall:.2f} audio-s per wall-s{queued}"
        )


if __name__ == "__main__":
    main()
