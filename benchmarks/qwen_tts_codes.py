"""The official Qwen3-TTS reference's greedy codes and audio for one request (vs_reference.py).

Runs INSIDE benchmarks/.venv-qwen-tts (setup-qwen-tts-venv.sh), never in omni-cpu's venv;
imports nothing from omni-cpu. Greedy in the talker and the code predictor
(`do_sample=False`, `subtalker_dosample=False`), exactly `--frames` frames (end-of-speech
masked until then, as qwen_tts_reference.py does), then the reference's own decode of
those codes. Writes codes [frames, 16] and the waveform to `--out` (.npz) and prints one
JSON line of facts.

    benchmarks/.venv-qwen-tts/bin/python benchmarks/qwen_tts_codes.py \
        --model checkpoints/0.6b --speaker ryan --frames 40 --dtype float32 --out ref.npz
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from importlib import metadata

from qwen_tts_reference import DTYPES, force_frame_count


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint directory (real layout)")
    parser.add_argument("--text", required=True)
    parser.add_argument("--speaker", default="", help="CustomVoice: a preset voice")
    parser.add_argument("--instruct", default="", help="VoiceDesign: the voice described")
    parser.add_argument("--ref-audio", default="", help="Base: the voice to clone (a file)")
    parser.add_argument("--ref-text", default="", help="Base: what the reference audio says")
    parser.add_argument("--x-vector-only", action="store_true", help="Base: timbre only")
    parser.add_argument("--language", default="Auto")
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--repetition-penalty", type=float, default=1.05)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True, help="an .npz file: codes, wave, sample_rate")
    args = parser.parse_args(argv)
    args.dtype = DTYPES[args.dtype]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    with contextlib.redirect_stdout(sys.stderr):
        from qwen_tts import Qwen3TTSModel

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as omni-cpu's stages and qwen_tts_reference.py do
    model = Qwen3TTSModel.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype), device_map="cpu"
    )
    frames_seen: list[int] = []
    force_frame_count(model, frames_seen)
    codes_seen: list[torch.Tensor] = []
    generate = model.model.generate

    def generate_recording(*a: object, **k: object) -> object:
        codes, hidden = generate(*a, **k)
        codes_seen.append(codes[0].detach().clone())
        return codes, hidden

    model.model.generate = generate_recording
    greedy = {
        "do_sample": False,
        "subtalker_dosample": False,
        "repetition_penalty": args.repetition_penalty,
        "max_new_tokens": args.frames + 1,
    }
    with torch.inference_mode():
        if args.ref_audio:
            wavs, rate = model.generate_voice_clone(
                text=args.text, language=args.language, ref_audio=args.ref_audio,
                ref_text=args.ref_text or None, x_vector_only_mode=args.x_vector_only, **greedy,
            )  # fmt: skip
        elif args.speaker:
            wavs, rate = model.generate_custom_voice(
                text=args.text, speaker=args.speaker, language=args.language,
                instruct=args.instruct or None, **greedy,
            )  # fmt: skip
        else:
            wavs, rate = model.generate_voice_design(
                text=args.text, instruct=args.instruct, language=args.language, **greedy
            )
    codes = codes_seen[-1].to(torch.int64).numpy()
    np.savez(args.out, codes=codes, wave=np.asarray(wavs[0], dtype=np.float32), sample_rate=rate)
    print(
        json.dumps(
            {
                "qwen_tts": metadata.version("qwen-tts"),
                "torch": torch.__version__,
                "transformers": metadata.version("transformers"),
                "frames": int(codes.shape[0]),
                "dtype": args.dtype,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
