"""Same speech as the official reference: qwen-tts and omni-cpu, greedy, on one checkpoint.

Both sides get the same checkpoint, text, voice (CustomVoice speaker, VoiceDesign
instruction or Base reference audio: give a 24 kHz mono file, which neither side resamples),
language and frame count, greedy in the talker and the code predictor, in
`--dtype` (float32 by default). It reports:
- codes, free-running: per codebook, the share of frames where omni-cpu's talker (loaded
  in this process by the talker stage's own load path, omni_cpu.platform.inprocess) picks
  the reference's code, and the first frame where any code differs;
- codes, teacher-forced: fed the reference's frames, how often omni-cpu's layer-0 argmax
  and its 15 residual codes (for the reference's layer-0 code) are the reference's;
- audio: `omni-cpu run --greedy` through the engines (a float32 profile of this machine)
  against the reference's own audio, and the reference's codes through vLLM-Omni's decoder
  against the same, as SNR in dB (inf: the same samples).
With `--weights int8` or `int4` it measures quantization instead: the reference runs
float32, omni-cpu's talker in that weight format (in process, `--dtype` activations) is
free-running and teacher-forced on the reference's codes, and beside it stand two figures of
plain bfloat16 rounding: omni-cpu's bf16 talker teacher-forced on the same codes, and the
reference's own bf16 run against its float32 run (free-running; qwen-tts has no
teacher-forcing). No audio: one different code changes the rest of the waveform.
In-process figures are for repetition penalty 1.0 (the in-process loop takes the argmax);
the engines and the reference take `--repetition-penalty`. Appends a dated section to
benchmarks/RESULTS.md unless `--no-record`. Run it from omni-cpu's venv:

    .venv/bin/python benchmarks/vs_reference.py --model checkpoints/0.6b --frames 40
    .venv/bin/python benchmarks/vs_reference.py --model checkpoints/1.7b-vd \
        --instruct "A warm, low female voice" --frames 20
    .venv/bin/python benchmarks/vs_reference.py --model checkpoints/0.6b --frames 20 \
        --weights int8
    .venv/bin/python benchmarks/vs_reference.py --model checkpoints/0.6b-base \
        --ref-audio voice.wav --ref-text "What the clip says." --frames 20

The reference runs in benchmarks/.venv-qwen-tts (benchmarks/setup-qwen-tts-venv.sh).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from compare_qwen_tts import (
    REFERENCE_PYTHON,
    REPO,
    RESULTS_FILE,
    append_results,
    machine_facts,
    probe_command,
    run_probe,
)

from omni_cpu.errors import InputError, OmniCpuError, RuntimeMissingError, StageError
from omni_cpu.speech.wav import to_pcm16

CODES_SCRIPT = Path("benchmarks/qwen_tts_codes.py")
DEFAULT_TEXT = "Hello there. This is a test of speech synthesis."
GROUPS = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=Path("checkpoints/0.6b"))
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--speaker", default=None, help="CustomVoice (default ryan)")
    parser.add_argument("--instruct", default="", help="VoiceDesign: the voice described")
    parser.add_argument(
        "--ref-audio", type=Path, default=None, help="Base: the voice to clone (24 kHz mono WAV)"
    )
    parser.add_argument("--ref-text", default="", help="Base: what the reference audio says")
    parser.add_argument("--x-vector-only", action="store_true", help="Base: timbre only")
    parser.add_argument("--language", default="Auto")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--weights",
        choices=("model", "int8", "int4"),
        default="model",
        help="omni-cpu's talker weights; int8/int4: teacher-forced against float32 (in process)",
    )
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--omni-cpu", default=".venv/bin/omni-cpu")
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args(argv)
    if args.frames < 1:
        parser.error("--frames must be >= 1")
    if args.speaker is None and not args.instruct and args.ref_audio is None:
        args.speaker = "ryan"
    return args


def snr_db(want: np.ndarray, got: np.ndarray) -> float:
    """10 log10(signal / error) over the common length; inf where the samples are equal."""
    n = min(want.size, got.size)
    error = float(np.sum((want[:n].astype(np.float64) - got[:n]) ** 2))
    signal = float(np.sum(want[:n].astype(np.float64) ** 2))
    return math.inf if error == 0 else 10 * math.log10(signal / error)


def as_pcm16(wave: np.ndarray) -> np.ndarray:
    """What a 16-bit WAV of `wave` reads back as (omni-cpu's output is one, written as
    omni_cpu.speech.wav.to_pcm16 writes it)."""
    return np.frombuffer(to_pcm16(wave), dtype="<i2").astype(np.float32) / 32767


def max_lsb(want: np.ndarray, got: np.ndarray) -> int:
    """The largest difference of two 16-bit waves (as read back) in steps of the WAV."""
    n = min(want.size, got.size)
    return round(float(np.max(np.abs(want[:n] - got[:n]), initial=0.0)) * 32767)


def code_agreement(want: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    """Per codebook share of equal codes over the common frames; the first frame that differs."""
    n = min(len(want), len(got))
    same = want[:n] == got[:n]
    differs = np.nonzero(~same.all(axis=1))[0]
    return {
        "frames": [len(want), len(got)],
        "per_codebook": [round(float(same[:, q].mean()), 4) if n else None for q in range(GROUPS)],
        "all": round(float(same.mean()), 4) if n else None,
        "first_divergence": int(differs[0]) if differs.size else None,
    }


def voice_options(args: argparse.Namespace) -> list[str]:
    """The voice, in the words both sides' command lines share."""
    options = []
    if args.speaker:
        options += ["--speaker", args.speaker]
    if args.instruct:
        options += ["--instruct", args.instruct]
    if args.ref_audio is not None:
        options += ["--ref-audio", str(args.ref_audio)]
        options += ["--x-vector-only"] if args.x_vector_only else ["--ref-text", args.ref_text]
    return options


def reference_command(args: argparse.Namespace, out: Path, dtype: str = "") -> list[str]:
    command = [str(REFERENCE_PYTHON), str(CODES_SCRIPT), "--model", str(args.model)]
    command += ["--text", args.text, "--language", args.language, "--frames", str(args.frames)]
    command += ["--dtype", dtype or args.dtype]
    command += ["--repetition-penalty", str(args.repetition_penalty)]
    return [*command, *voice_options(args), "--out", str(out)]


def engine_commands(args: argparse.Namespace, profile: Path, out: Path) -> list[list[str]]:
    probe = [args.omni_cpu, "probe", "--model", str(args.model), "--dtype", args.dtype]
    probe += ["--code2wav-dtype", args.dtype, "--output", str(profile)]
    run = [args.omni_cpu, "run", "--model", str(args.model), "--deploy-profile", str(profile)]
    run += ["--text", args.text, "--language", args.language.lower()]
    run += ["--max-frames", str(args.frames), "--greedy"]
    run += ["--repetition-penalty", str(args.repetition_penalty), "--out", str(out), "--json"]
    return [probe, [*run, *voice_options(args)]]


def _check(command: list[str]) -> str:
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StageError(f"{shlex.join(command)} failed: {done.stderr.strip()[-800:]}")
    return done.stdout


def in_process(
    args: argparse.Namespace, ref_codes: np.ndarray, weights: str = "model", dtype: str = ""
) -> dict[str, Any]:
    """omni-cpu's talker (the stage's load path) free-running and teacher-forced, in process."""
    import torch

    from omni_cpu.platform.inprocess import load_talker
    from omni_cpu.quality.check_weights import free_run, teacher_forced
    from omni_cpu.speech.ref_audio import read_reference_audio
    from omni_cpu.speech.request import SpeechRequest

    torch.set_flush_denormal(True)
    base = args.ref_audio is not None
    request = SpeechRequest(
        args.text,
        speaker=args.speaker or "",
        language=args.language,
        instruct=args.instruct,
        max_frames=args.frames,
        task_type="Base" if base else "CustomVoice" if args.speaker else "VoiceDesign",
        ref_audio=read_reference_audio(args.ref_audio) if base else None,
        ref_text=args.ref_text,
        x_vector_only=args.x_vector_only,
    )
    info = request.additional_information()
    talker = load_talker(args.model, weights, dtype or args.dtype)
    free, _ = free_run(talker, info, args.frames)
    reference = torch.from_numpy(ref_codes)
    logits, residuals, _ = teacher_forced(talker, info, reference)
    layer0 = [
        int(step.argmax()) == int(frame[0]) for step, frame in zip(logits, reference, strict=True)
    ]
    residual_same = (residuals[:, 1:] == reference[:, 1:]).float().mean()
    return {
        "free_running": code_agreement(ref_codes, free.numpy()),
        "teacher_forced": {
            "layer0": round(sum(layer0) / len(layer0), 4),
            "residual": round(float(residual_same), 4),
        },
    }


def compare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import soundfile
    import torch

    from omni_cpu.platform.inprocess import Code2Wav

    probe = run_probe(probe_command(args.omni_cpu, args.model))
    ref_file, profile, omni_wav = work / "ref.npz", work / "float32.yaml", work / "omni.wav"
    commands = [reference_command(args, ref_file), *engine_commands(args, profile, omni_wav)]
    reference_facts = json.loads(_check(commands[0]).strip().splitlines()[-1])
    ref = np.load(ref_file)
    ref_codes, ref_wave = ref["codes"], ref["wave"]
    # The engines first: this process's talker would hold its memory while they run (1.7B
    # float32: about 9 GB on each side, which a 23 GB machine shared with others did not have).
    for command in commands[1:]:
        _check(command)
    codes = in_process(args, ref_codes)
    decoded = Code2Wav(args.model).decode(torch.from_numpy(ref_codes)).numpy()
    engine_wave, _ = soundfile.read(str(omni_wav), dtype="float32")
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_facts(probe),
        "settings": request_settings(args),
        "reference": reference_facts,
        "codes": codes,
        "snr_db": {
            "engines_vs_reference": snr_db(as_pcm16(ref_wave), engine_wave),
            "vllm_omni_decoder_vs_reference": snr_db(ref_wave, decoded),
        },
        "max_lsb_engines_vs_reference": max_lsb(as_pcm16(ref_wave), engine_wave),
        "engine_samples": int(engine_wave.size),
        "reference_samples": int(ref_wave.size),
        "commands": [shlex.join(command) for command in commands],
    }


def request_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The request both sides were given, as a RESULTS section states it."""
    return {
        "model": str(args.model),
        "text": args.text,
        "voice": " ".join(voice_options(args)),
        "language": args.language,
        "frames": args.frames,
        "dtype": args.dtype,
        "repetition_penalty": args.repetition_penalty,
    }


def compare_quantized(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """`--weights` int8/int4 against the float32 reference, beside bf16 rounding on both sides."""
    probe = run_probe(probe_command(args.omni_cpu, args.model))
    float32, bf16 = work / "ref-float32.npz", work / "ref-bfloat16.npz"
    commands = [
        reference_command(args, float32, "float32"),
        reference_command(args, bf16, "bfloat16"),
    ]
    reference_facts = json.loads(_check(commands[0]).strip().splitlines()[-1])
    _check(commands[1])
    ref_codes, ref_bf16 = np.load(float32)["codes"], np.load(bf16)["codes"]
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_facts(probe),
        "settings": {**request_settings(args), "weights": args.weights},
        "reference": reference_facts,
        "codes": {
            "quantized": in_process(args, ref_codes, args.weights, args.dtype),
            "omni_cpu_bfloat16": in_process(args, ref_codes, "model", "bfloat16"),
            "reference_bfloat16": {"free_running": code_agreement(ref_codes, ref_bf16)},
        },
        "commands": [shlex.join(command) for command in commands],
    }


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.2%}"


def quantized_section(result: dict[str, Any]) -> str:
    """The dated Markdown section of a `--weights int8/int4` run."""
    machine, settings, codes = result["machine"], result["settings"], result["codes"]
    columns = (codes["quantized"], codes["omni_cpu_bfloat16"], codes["reference_bfloat16"])

    def row(name: str, pick: Any) -> str:
        return f"| {name} | " + " | ".join(pick(column) for column in columns) + " |"

    def first(column: dict[str, Any]) -> str:
        frame = column["free_running"]["first_divergence"]
        return "none" if frame is None else str(frame)

    def forced(part: str) -> Any:
        return lambda column: _share(column.get("teacher_forced", {}).get(part))

    weights, dtype = settings["weights"], settings["dtype"]
    lines = [
        f"## {result['date']}: {weights} against qwen-tts {result['reference']['qwen_tts']} "
        f"float32, greedy, {settings['frames']} frames",
        "",
        f"- Machine (`omni-cpu probe --json`): {machine['architecture']}, "
        f"{machine['model_name']}, {machine['usable_cpu_count']} usable CPUs, "
        f"ISA {' '.join(machine['isa']) or 'baseline'}.",
        f"- {settings['model']}, {settings['voice']}, language {settings['language']}, text "
        f"{settings['text']!r}, repetition penalty {settings['repetition_penalty']} (the "
        "reference; the in-process loop is argmax). omni-cpu in process (the talker stage's "
        f"load path); {weights} with {dtype} activations.",
        "",
        "```sh",
        f".venv/bin/python benchmarks/vs_reference.py --model {settings['model']} "
        f"--frames {settings['frames']} --weights {weights} --dtype {dtype}",
        *result["commands"],
        "```",
        "",
        f"| against the reference's float32 codes | omni-cpu {weights} | omni-cpu bf16 "
        "| qwen-tts bf16 |",
        "|---|---|---|---|",
        row(
            "codes equal, free-running, all 16 codebooks",
            lambda c: _share(c["free_running"]["all"]),
        ),
        row("first differing frame", first),
        row("teacher-forced layer-0 argmax = reference", forced("layer0")),
        row("teacher-forced residual codes = reference", forced("residual")),
    ]
    return "\n".join(lines) + "\n"


def _db(value: float) -> str:
    return "inf (identical)" if math.isinf(value) else f"{value:.1f} dB"


def results_section(result: dict[str, Any]) -> str:
    """The dated Markdown section appended to RESULTS.md."""
    machine, settings, codes = result["machine"], result["settings"], result["codes"]
    free, forced, snr = codes["free_running"], codes["teacher_forced"], result["snr_db"]
    first = free["first_divergence"]
    lines = [
        f"## {result['date']}: same speech as qwen-tts {result['reference']['qwen_tts']}, "
        f"{settings['dtype']} greedy, {settings['frames']} frames",
        "",
        f"- Machine (`omni-cpu probe --json`): {machine['architecture']}, "
        f"{machine['model_name']}, {machine['usable_cpu_count']} usable CPUs, "
        f"ISA {' '.join(machine['isa']) or 'baseline'}.",
        f"- {settings['model']}, {settings['voice']}, language {settings['language']}, text "
        f"{settings['text']!r}, repetition penalty {settings['repetition_penalty']} (engines "
        "and reference; the in-process loop is argmax).",
        "",
        "```sh",
        f".venv/bin/python benchmarks/vs_reference.py --model {settings['model']} "
        f"--frames {settings['frames']} --dtype {settings['dtype']}",
        *result["commands"],
        "```",
        "",
        "| figure | value |",
        "|---|---|",
        f"| frames (reference, omni-cpu in process) | {free['frames'][0]}, {free['frames'][1]} |",
        f"| codes equal, free-running, all 16 codebooks | {free['all']:.2%} |",
        f"| first differing frame | {'none' if first is None else first} |",
        f"| teacher-forced layer-0 argmax = reference | {forced['layer0']:.2%} |",
        f"| teacher-forced residual codes = reference | {forced['residual']:.2%} |",
        f"| audio: `omni-cpu run --greedy` (engines) vs reference | "
        f"{_db(snr['engines_vs_reference'])} |",
        f"| audio: engines vs reference, largest difference in the 16-bit WAV | "
        f"{result['max_lsb_engines_vs_reference']} LSB |",
        f"| audio: reference codes, vLLM-Omni decoder vs reference decoder | "
        f"{_db(snr['vllm_omni_decoder_vs_reference'])} |",
    ]
    per = free["per_codebook"]
    lines.append("| codes equal per codebook (0-15) | " + " ".join(f"{v:.0%}" for v in per) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not (REPO / REFERENCE_PYTHON).exists():
            raise RuntimeMissingError(
                f"no reference venv at {REFERENCE_PYTHON}", "run benchmarks/setup-qwen-tts-venv.sh"
            )
        if not (args.model / "config.json").exists():
            raise InputError(
                f"{args.model} is not a checkpoint",
                f"make one: {args.omni_cpu} make-checkpoint --size 0.6b --out {args.model}",
            )
        with tempfile.TemporaryDirectory(prefix="vs-reference-") as folder:
            measure = compare if args.weights == "model" else compare_quantized
            result = measure(args, Path(folder))
    except OmniCpuError as error:
        print(f"error: {error.one_line()}", file=sys.stderr)
        return error.exit_code
    print(json.dumps(result, indent=2, default=str))
    if not args.no_record:
        section = results_section if args.weights == "model" else quantized_section
        append_results(section(result), REPO / RESULTS_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
