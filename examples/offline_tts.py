"""Offline Qwen3-TTS on CPU for each task type, as vLLM-Omni's `end2end.py --query-type` runs it.

omni-cpu plans the machine (or reads a checked-in profile), starts both stage
engines with it, synthesizes one utterance and writes a 24 kHz WAV:

  # preset speaker (CustomVoice; --instruct works on the 1.7B)
  python examples/offline_tts.py --model checkpoints/0.6b --query-type CustomVoice --speaker vivian

  # a voice described in words (VoiceDesign 1.7B)
  python examples/offline_tts.py --model checkpoints/1.7b-vd --query-type VoiceDesign \\
      --instruct "A warm, low female voice, speaking slowly"

  # clone a voice from a few seconds of audio (Base)
  python examples/offline_tts.py --model checkpoints/0.6b-base --query-type Base \\
      --ref-audio voice.wav --ref-text "What the clip says."

Make a random-weight checkpoint of any kind with
`omni-cpu make-checkpoint --kind base --size tiny --out checkpoints/tiny-base`
(its audio is noise; its speed is the real model's). `--dry-run` prints what
each stage would get and starts nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omni_cpu import api


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint directory or hub id")
    parser.add_argument("--query-type", choices=api.TASK_TYPES, default=None)
    parser.add_argument("--deploy-profile", default="auto", help="auto or a profile YAML")
    parser.add_argument("--text", default="Hello from a CPU. This is Qwen3-TTS on vLLM-Omni.")
    parser.add_argument("--speaker", default=None, help="CustomVoice: a preset speaker")
    parser.add_argument("--instruct", default=None, help="VoiceDesign: the voice in words")
    parser.add_argument("--ref-audio", type=Path, default=None, help="Base: the voice to clone")
    parser.add_argument("--ref-text", default=None, help="Base: what the reference says")
    parser.add_argument("--x-vector-only", action="store_true", help="Base: timbre only")
    parser.add_argument("--max-frames", type=int, default=None, help="80 ms each")
    parser.add_argument("--out", type=Path, default=Path("output.wav"))
    parser.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    info = api.read_model_info(args.model)
    reference = api.read_reference_audio(args.ref_audio) if args.ref_audio else None
    requests = api.build_requests(
        info,
        [args.text],
        args.speaker,
        instruct=args.instruct,
        max_frames=args.max_frames,
        query_type=args.query_type,
        ref_audio=reference,
        ref_text=args.ref_text,
        x_vector_only=args.x_vector_only,
    )
    plan = api.make_launch_plan(args.model, args.deploy_profile)
    if args.dry_run:
        description = plan.describe()
        description["task_type"] = requests[0].task_type
        print(json.dumps(description, indent=2))
        return

    # Once, before torch loads: this script re-executes itself with the stages' LD_PRELOAD
    # so they can be forked from it, not started as fresh interpreters that import torch,
    # vLLM and vLLM-Omni again (what `omni-cpu run` does; it returns where that cannot be).
    api.prepare_process(plan)
    result = api.synthesize(plan, requests, [args.out], progress=print)
    print(
        f"{requests[0].task_type}: wrote {args.out} ({result.audio_s:.2f} s of audio, "
        f"RTF {result.rtf:.2f}, engines up in {result.load_s:.1f} s)"
    )


if __name__ == "__main__":  # engines may start in spawned processes: keep this guard
    try:
        main()
    except api.OmniCpuError as error:
        raise SystemExit(f"error: {error.one_line()}") from None
