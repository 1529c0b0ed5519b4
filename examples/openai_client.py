"""The official `openai` client against `omni-cpu serve`: preset voice, voice design, voice clone.

Start a server first (one per model; it serves the model's own task type). A random-weight
checkpoint never ends a sentence by itself, so bound it (`--max-frames`; a Base one also
`--accept-frame-limit`, else a request that reaches the bound is a 500):

  omni-cpu serve --model checkpoints/0.6b-base --port 8000 --max-frames 124 --accept-frame-limit

then stream a cloned voice into a WAV (reference audio travels as base64):

  python examples/openai_client.py --ref-audio voice.wav --ref-text "What it says." --out clone.wav

For a CustomVoice server, `--voice vivian` (and `--instructions "..."` on the 1.7B); for a
VoiceDesign server, `--instructions "..."` alone. The task type follows from them (`--task-type`
says it outright). Needs `openai` (pip install 'omni-cpu[examples]'). `--dry-run` prints the
request body it would send (the audio shortened) and exits.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import wave
from pathlib import Path
from typing import Any

SAMPLE_RATE = 24_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default=None, help="default: the server's first model")
    parser.add_argument("--text", default="Hello from omni-cpu, streamed over HTTP.")
    parser.add_argument("--voice", default=None, help="CustomVoice: a preset speaker (ryan)")
    parser.add_argument(
        "--instructions", default=None, help="VoiceDesign: the voice; CustomVoice: the style"
    )
    parser.add_argument(
        "--task-type",
        choices=("CustomVoice", "VoiceDesign", "Base"),
        default=None,
        help="default: Base with --ref-audio, VoiceDesign with --instructions and no --voice, "
        "else CustomVoice",
    )
    parser.add_argument("--ref-audio", type=Path, default=None, help="Base: the voice to clone")
    parser.add_argument("--ref-text", default=None, help="Base: what the reference says")
    parser.add_argument("--x-vector-only", action="store_true")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="codec frames")
    parser.add_argument("--out", type=Path, default=Path("speech.wav"))
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args()


def task_type(args: argparse.Namespace) -> str:
    """The server's task type as these options imply it (vLLM-Omni assumes CustomVoice)."""
    if args.task_type is not None:
        return args.task_type
    if args.ref_audio is not None:
        return "Base"
    if args.instructions is not None and args.voice is None:
        return "VoiceDesign"  # a voice described in words, no preset speaker
    return "CustomVoice"


def extra_body(args: argparse.Namespace) -> dict[str, Any]:
    """vLLM-Omni's speech fields beyond OpenAI's: task type, cloning, streaming."""
    body: dict[str, Any] = {"stream": True, "stream_format": "audio", "task_type": task_type(args)}
    if args.ref_audio is not None:
        encoded = base64.b64encode(args.ref_audio.read_bytes()).decode()
        body["ref_audio"] = f"data:audio/wav;base64,{encoded}"
        if args.x_vector_only:
            body["x_vector_only_mode"] = True
        else:
            body["ref_text"] = args.ref_text
    if args.max_new_tokens is not None:
        body["max_new_tokens"] = args.max_new_tokens
    return body


def voice(args: argparse.Namespace) -> str:
    """OpenAI's API requires a voice; only CustomVoice reads it (a preset speaker)."""
    return args.voice or "ryan"


def main() -> None:
    args = parse_args()
    if args.ref_audio is not None and not (args.ref_text or args.x_vector_only):
        raise SystemExit("error: --ref-audio needs --ref-text (or --x-vector-only)")
    body = extra_body(args)
    if args.dry_run:
        shown = {**body}
        if "ref_audio" in shown:
            shown["ref_audio"] = shown["ref_audio"][:48] + "..."
        print(json.dumps({"input": args.text, "voice": voice(args), **shown}, indent=2))
        return

    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key="none")
    model = args.model or client.models.list().data[0].id
    start = time.perf_counter()
    first: float | None = None
    pcm = bytearray()
    with client.audio.speech.with_streaming_response.create(
        model=model,
        input=args.text,
        voice=voice(args),
        instructions=args.instructions or openai.NOT_GIVEN,
        response_format="pcm",
        extra_body=body,
    ) as reply:
        for chunk in reply.iter_bytes():
            if first is None and chunk:
                first = time.perf_counter() - start
                print(f"first audio after {first:.2f} s")
            pcm += chunk
    with wave.open(str(args.out), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(SAMPLE_RATE)
        handle.writeframes(bytes(pcm))
    seconds = len(pcm) / 2 / SAMPLE_RATE
    print(f"wrote {args.out}: {seconds:.2f} s of audio in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
