"""Time the official Qwen3-TTS reference (PyPI `qwen-tts`) on one CustomVoice request.

Runs INSIDE benchmarks/.venv-qwen-tts (made by setup-qwen-tts-venv.sh), never in
omni-cpu's venv: qwen-tts pins transformers 4.57.3. It imports nothing from omni-cpu.

It loads a checkpoint directory with `Qwen3TTSModel.from_pretrained`, synthesizes
the text for the speaker with `generate_custom_voice` for exactly `--frames` codec
frames, once to warm up and then `--runs` timed times, and prints one JSON line on
stdout (everything else goes to stderr). `generate_custom_voice` decodes audio only
after the last frame, so its time to first audio is its whole wall time.

Example (from the repo root):
    benchmarks/.venv-qwen-tts/bin/python benchmarks/qwen_tts_reference.py \
        --model checkpoints/0.6b --frames 124 --threads 2 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import sys
import time
from importlib import metadata
from typing import Any

FRAME_RATE_HZ = 12.5  # the 12 Hz speech tokenizer: one codec frame is 80 ms of audio
PROCESS_STARTED = time.time()
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint directory (real layout)")
    parser.add_argument("--text", default="Hello there. This is a test of speech synthesis.")
    parser.add_argument("--speaker", default="ryan")
    parser.add_argument("--language", default="Auto", help="as qwen-tts names it; Auto detects")
    parser.add_argument("--frames", type=int, default=124, help="codec frames to emit, exactly")
    parser.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warmup")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.frames < 1 or args.threads < 1 or args.runs < 1 or args.warmup < 0:
        parser.error("--frames, --threads and --runs must be >= 1, --warmup >= 0")
    args.dtype = DTYPES[args.dtype]
    return args


def force_frame_count(model: Any, frames_seen: list[int]) -> None:
    """Make every request run to max_new_tokens, and record how many frames it emitted.

    Random weights rarely sample the codec EOS, but sometimes they do, which would make
    runs incomparable. qwen-tts hard-codes `min_new_tokens=2` for the talker, so we
    raise it to `max_new_tokens` at the talker's `generate` (transformers' min-length
    processor then masks EOS at every step). The count comes from the codes that
    reach the decoder, and main() refuses to report a run that missed it.
    """
    talker = model.model.talker
    talker_generate = talker.generate

    def talker_generate_fixed(*args: Any, **kwargs: Any) -> Any:
        kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
        return talker_generate(*args, **kwargs)

    talker.generate = talker_generate_fixed

    model_generate = model.model.generate

    def model_generate_recording(*args: Any, **kwargs: Any) -> Any:
        codes, hidden = model_generate(*args, **kwargs)
        frames_seen.append(int(codes[0].shape[0]))
        return codes, hidden

    model.model.generate = model_generate_recording


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import torch  # the heavy imports come after argument errors are reported

    # qwen-tts prints a flash-attn notice on stdout at import: stdout is for the result.
    with contextlib.redirect_stdout(sys.stderr):
        from qwen_tts import Qwen3TTSModel

    torch.set_num_threads(args.threads)
    # Random weights drive activations into denormals; on x86 each one costs a
    # microcode assist (fp32 measured 3.6x slower without this). omni-cpu flushes too.
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)

    model = Qwen3TTSModel.from_pretrained(args.model, dtype=dtype, device_map="cpu")
    # Imports and load, from interpreter start (perf_counter's zero is unspecified).
    startup_seconds = time.time() - PROCESS_STARTED
    frames_seen: list[int] = []
    force_frame_count(model, frames_seen)

    def synthesize() -> tuple[float, int, int]:
        started = time.perf_counter()
        wavs, sample_rate = model.generate_custom_voice(
            text=args.text,
            speaker=args.speaker,
            language=args.language,
            # The talker completes frame k (its 15 residual codes) in the step that
            # samples token k+1, so N frames take N+1 tokens, the last one standing
            # where EOS would: the same work as a natural N-frame utterance.
            max_new_tokens=args.frames + 1,
        )
        return time.perf_counter() - started, len(wavs[0]), sample_rate

    for index in range(args.warmup):
        wall, _, _ = synthesize()
        print(f"qwen_tts_reference: warmup {index + 1}: {wall:.2f} s", file=sys.stderr)
    walls = []
    for index in range(args.runs):
        wall, samples, sample_rate = synthesize()
        walls.append(wall)
        print(f"qwen_tts_reference: run {index + 1}: {wall:.2f} s", file=sys.stderr)

    frames = frames_seen[-1]
    if any(seen != args.frames for seen in frames_seen):
        print(
            f"qwen_tts_reference: error: asked for {args.frames} frames, got {frames_seen}",
            file=sys.stderr,
        )
        return 1
    audio_seconds = frames / FRAME_RATE_HZ
    wall_seconds = statistics.median(walls)
    result = {
        "implementation": "qwen-tts",
        "version": metadata.version("qwen-tts"),
        "torch": torch.__version__,
        "transformers": metadata.version("transformers"),
        "frames": frames,
        "frames_requested": args.frames,
        "audio_seconds": audio_seconds,
        "audio_samples": samples,
        "sample_rate": sample_rate,
        "wall_seconds": wall_seconds,
        "wall_seconds_runs": walls,
        "rtf": wall_seconds / audio_seconds,
        # generate_custom_voice returns audio only once generation has ended.
        "ttfa_seconds": wall_seconds,
        "startup_seconds": startup_seconds,
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "runs": args.runs,
        "warmup": args.warmup,
        # ru_maxrss is KiB on Linux.
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
