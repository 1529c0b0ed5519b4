"""Stream speech into a WAV file as it is made, printing the time to first audio.

Each chunk the code2wav stage emits is appended to the WAV at once (the file is
renamed into place when the utterance is complete), and every chunk's arrival is
printed, so you see what a listener would: first audio after TTFA, then chunks of
codec frames (80 ms each).

  python examples/stream_to_wav.py --model checkpoints/0.6b --out hello.wav
  python examples/stream_to_wav.py --model checkpoints/0.6b-base \\
      --ref-audio voice.wav --ref-text "What the clip says." --out clone.wav
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from omni_cpu import api


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--deploy-profile", default="auto")
    parser.add_argument("--text", default="Streaming speech from a CPU, chunk by chunk.")
    parser.add_argument("--speaker", default=None)
    parser.add_argument("--instruct", default=None)
    parser.add_argument("--ref-audio", type=Path, default=None)
    parser.add_argument("--ref-text", default=None)
    parser.add_argument("--max-frames", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("stream.wav"))
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    info = api.read_model_info(args.model)
    reference = api.read_reference_audio(args.ref_audio) if args.ref_audio else None
    (request,) = api.build_requests(
        info,
        [args.text],
        args.speaker,
        instruct=args.instruct,
        max_frames=args.max_frames,
        ref_audio=reference,
        ref_text=args.ref_text,
    )
    plan = api.make_launch_plan(args.model, args.deploy_profile)
    if args.dry_run:
        print(json.dumps({"task_type": request.task_type, "plan": plan.describe()}, indent=2))
        return

    writer = api.AtomicWavWriter(args.out)
    written = 0

    def on_chunk(index: int, audio: Any, seconds: float) -> None:
        nonlocal written
        if written == 0:
            print(f"first audio after {seconds:.2f} s (TTFA)")
        writer.append(audio)
        written += audio.size
        print(f"  +{audio.size / api.SAMPLE_RATE:.2f} s of audio at {seconds:.2f} s")

    try:
        with api.PipelineSession(plan) as session:
            print(f"engines up in {session.load_s:.1f} s")
            wall = session.generate([request], stream=True, on_chunk=on_chunk)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    audio_s = written / api.SAMPLE_RATE
    print(f"wrote {args.out}: {audio_s:.2f} s of audio in {wall:.2f} s (RTF {wall / audio_s:.2f})")


if __name__ == "__main__":
    try:
        main()
    except api.OmniCpuError as error:
        raise SystemExit(f"error: {error.one_line()}") from None
