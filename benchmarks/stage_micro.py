"""Where a talker-stage frame and a code2wav frame go, measured outside the engines.

Three measurements on the 0.6B checkpoint's shapes, with the thread count of one
stage (default 1) and denormals flushed like the stage workers do:

1. weight streaming: the code predictor's 20 linear layers at batch 1, float32 and
   int8 (FBGEMM dynamic), as GB/s of weights read; this is the memory-bandwidth
   ceiling every decode step lives under;
2. the code predictor per 80 ms frame (15 residual codebooks): vLLM-Omni's stock
   re-prefill forward, omni-cpu's KV-cached forward, and that with int8 weights;
3. code2wav: the 12 Hz decoder's plain decode at several lengths (ms per decoded
   frame and fixed cost), and its streaming path (1 frame, then 25-frame chunks)
   as vLLM-Omni's async-chunk stage calls it;
4. code2wav streaming, float32 and bfloat16: omni-cpu's streaming decode
   (omni_cpu.models.code2wav, each frame once) against vLLM-Omni's
   recompute path (OMNI_CPU_CODE2WAV=recompute), ms per new audio frame in
   steady 25-frame chunks and for a ragged 5-frame last chunk, and each one's
   largest difference from the whole-utterance decode;
5. the code predictor's step (`--only code-predictor-step`, bf16 / int8 / int4 weights
   on omni-cpu's GEMV): FusedRunner's torch calls against the one-call C++ step, per
   position and per whole frame, alternating in one process, with the bytes a frame
   streams.

Run from the repo root (about 3 minutes on 2 cores; keep the machine quiet):

    .venv/bin/python benchmarks/stage_micro.py                 # writes stage-micro-results.json
    .venv/bin/python benchmarks/stage_micro.py --threads 2 --no-record
    .venv/bin/python benchmarks/stage_micro.py --only code2wav-stream --no-record
    .venv/bin/python benchmarks/stage_micro.py --only code-predictor-step --no-record
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "stage-micro-results.json"
FRAME_S = 0.08


def timed_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall milliseconds of `fn` over `repeat` calls after one warm-up."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000.0)
    return sorted(samples)[len(samples) // 2]


def weight_streaming(torch: Any, predictor_config: Any) -> dict[str, float]:
    """GB/s of weights read by the predictor's linears at batch 1."""
    from omni_cpu.kernels.fbgemm import Int8Weights

    hidden, inter = predictor_config.hidden_size, predictor_config.intermediate_size
    heads, kv, dim = (
        predictor_config.num_attention_heads,
        predictor_config.num_key_value_heads,
        predictor_config.head_dim,
    )
    shapes = [
        (hidden, (heads + 2 * kv) * dim),
        (heads * dim, hidden),
        (hidden, 2 * inter),
        (inter, hidden),
    ] * predictor_config.num_hidden_layers
    weights = [torch.randn(out, inp) * 0.02 for inp, out in shapes]
    inputs = [torch.randn(1, w.shape[1]) for w in weights]
    params = sum(w.numel() for w in weights)
    pairs = list(zip(inputs, weights, strict=True))
    fp32 = timed_ms(lambda: [torch.nn.functional.linear(x, w) for x, w in pairs], 20)
    packed = [(x, Int8Weights(w)) for x, w in pairs]
    int8 = timed_ms(lambda: [p(x) for x, p in packed], 20)
    return {
        "params_millions": round(params / 1e6, 1),
        "float32_ms_per_step": round(fp32, 2),
        "float32_gb_per_s": round(params * 4 / fp32 / 1e6, 1),
        "int8_ms_per_step": round(int8, 2),
        "int8_gb_per_s": round(params / int8 / 1e6, 1),
    }


def make_predictor(torch: Any, model: Path, seed: int = 0) -> tuple[Any, Any, int]:
    """(the checkpoint's code predictor with random weights, its config, the talker width)."""
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
        Qwen3TTSTalkerCodePredictorConfig,
        Qwen3TTSTalkerConfig,
    )
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
        Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM as CodePredictor,
    )

    talker = json.loads((model / "config.json").read_text())["talker_config"]
    config = Qwen3TTSTalkerCodePredictorConfig(**talker["code_predictor_config"])
    predictor = CodePredictor(
        vllm_config=types.SimpleNamespace(model_config=None),
        config=config,
        talker_config=Qwen3TTSTalkerConfig(**talker),
    ).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in predictor.parameters():
            parameter.normal_(0.0, 0.02)
    return predictor, config, int(talker["hidden_size"])


def code_predictor(torch: Any, model: Path) -> tuple[dict[str, float], Any]:
    """ms per frame of the three code-predictor forwards."""
    from omni_cpu.models.cached_predictor import cached_forward
    from omni_cpu.models.int8 import quantize_linears

    predictor, config, width = make_predictor(torch, model)

    def frame(forward: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: forward(
            layer0_code=torch.randint(0, config.vocab_size, (1, 1)),
            layer0_embed=torch.randn(1, 1, width),
            last_talker_hidden=torch.randn(1, 1, width),
        )

    result = {
        "stock_reprefill_ms_per_frame": round(timed_ms(frame(predictor.forward), 3), 1),
        "cached_ms_per_frame": round(
            timed_ms(frame(types.MethodType(cached_forward, predictor)), 7), 1
        ),
    }
    quantize_linears(predictor)
    result["cached_int8_ms_per_frame"] = round(
        timed_ms(frame(types.MethodType(cached_forward, predictor)), 7), 1
    )
    return result, config


STEP_WEIGHTS = ("model", "int8", "int4")


def code_predictor_step(torch: Any, model: Path, rounds: int) -> dict[str, Any]:
    """ms per sampled code-predictor frame: FusedRunner against the one-call C++ step.

    bf16, each weight format on omni-cpu's GEMV (its AVX2 build under OMNI_CPU_GEMV=avx2),
    one process, the forwards alternating
    round by round (best and median of `rounds`): `ops` is FusedRunner (vLLM's CPU ops,
    a torch call each), `step_positions` the C++ step per position with predict_codes'
    Python sampling, `step_frame` the whole frame in one call. Bytes per frame: every
    layer's packed weights 15 times (2 positions at once, then 14 one at a time) and
    each lm head once.
    """
    from omni_cpu.models import fused_predictor, linears, predictor_step
    from omni_cpu.models.cached_predictor import predict_codes

    class Positions:  # the step without its frame: predict_codes' own loop
        def __init__(self, step: Any) -> None:
            self.step = step

        def __call__(self, *args: Any) -> Any:
            return self.step(*args)

    data = torch.ones(512 * 2**20 // 4, dtype=torch.float32)  # the memory ceiling: a plain read
    read_s = []
    for _ in range(6):
        begin = time.perf_counter()
        data.sum()
        read_s.append(time.perf_counter() - begin)
    plain_read = data.numel() * 4 / min(read_s[1:]) / 1e9
    del data
    result: dict[str, Any] = {"plain_read_gb_per_s": round(plain_read, 1)}
    for weights in STEP_WEIGHTS:
        predictor, config, width = make_predictor(torch, model)
        predictor = predictor.to(torch.bfloat16)
        linears.route_linears(predictor, weights)
        predictor._setup_compile()
        step = predictor_step.StepRunner.build(predictor)
        if step is None:
            return {"skipped": "the step needs omni-cpu's GEMV (OMNI_CPU_GEMV off?)"}
        runners = {
            "ops": fused_predictor.FusedRunner(predictor.model),
            "step_positions": Positions(step),
            "step_frame": step,
        }
        generator = torch.Generator().manual_seed(1)
        feed = {
            "layer0_code": torch.randint(0, config.vocab_size, (1, 1), generator=generator),
            "layer0_embed": torch.randn(1, 1, width, generator=generator),
            "last_talker_hidden": torch.randn(1, 1, width, generator=generator),
        }
        samples: dict[str, list[float]] = {name: [] for name in runners}
        with torch.inference_mode():
            for round_index in range(rounds + 1):
                for name, runner in runners.items():
                    begin = time.perf_counter()
                    predict_codes(predictor, runner, **feed)
                    if round_index:  # the first round warms up
                        samples[name].append((time.perf_counter() - begin) * 1e3)

        def packed_bytes(linear: Any) -> int:  # the packed weights and their scales
            for isa in predictor_step.STEP_FORMATS:
                spec = predictor_step.linear_spec(linear, isa)
                if spec is not None:
                    return sum(t.numel() * t.element_size() for t in spec[1:4] if t is not None)
            return 0

        layer_bytes = sum(
            packed_bytes(m)
            for layer in predictor.model.layers
            for m in (
                layer.self_attn.qkv_proj,
                layer.self_attn.o_proj,
                layer.mlp.gate_up_proj,
                layer.mlp.down_proj,
            )
        )
        head_bytes = sum(packed_bytes(head) for head in predictor.lm_head)
        frame_bytes = (config.num_code_groups - 1) * layer_bytes + head_bytes
        best = {name: min(ms) for name, ms in samples.items()}
        result["bf16" if weights == "model" else weights] = {
            "best_ms": {name: round(ms, 1) for name, ms in best.items()},
            "median_ms": {name: round(sorted(ms)[len(ms) // 2], 1) for name, ms in samples.items()},
            "mb_per_frame": round(frame_bytes / 1e6),
            "gb_per_s_step_frame": round(frame_bytes / best["step_frame"] / 1e6, 1),
            "plain_read_floor_ms": round(frame_bytes / plain_read / 1e6, 1),
            "step_frame_speedup": round(best["ops"] / best["step_frame"], 2),
        }
    return result


def load_decoder(torch: Any, model: Path) -> tuple[Any, int]:
    """The checkpoint's 12 Hz decoder (float32, eval) and its number of codebooks."""
    from safetensors import safe_open
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as tokenizer_config,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as tokenizer_model,
    )

    config = tokenizer_config.Qwen3TTSTokenizerV2Config.from_pretrained(
        str(model), subfolder="speech_tokenizer"
    )
    decoder = tokenizer_model.Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    state = {}
    with safe_open(str(model / "speech_tokenizer" / "model.safetensors"), "pt") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open has no iterator
            if key.startswith("decoder."):
                state[key.removeprefix("decoder.")] = handle.get_tensor(key)
    decoder.load_state_dict(state, strict=False)
    decoder.eval().precompute_snake_caches()
    decoder._initial_codec_chunk_frames = 1
    decoder._incremental_chunk_frames = 25
    decoder._incremental_chunk_ramp = []
    return decoder, int(config.decoder_config.num_quantizers)


def code2wav(torch: Any, model: Path) -> dict[str, Any]:
    """The 12 Hz decoder: plain decode per length, and the streaming chunks."""
    decoder, groups = load_decoder(torch, model)
    codes = torch.randint(0, 2048, (1, groups, 200), generator=torch.Generator().manual_seed(0))
    plain = {}
    with torch.no_grad():
        for frames in (1, 25, 50):
            plain[frames] = timed_ms(lambda f=frames: decoder(codes[..., :f]), 1)
        cache: dict[str, Any] = {"prefix_frames": 0}
        chunks, start = [], 0
        for size in (1, 25, 25, 25, 25):
            begin = time.perf_counter()
            decoder.batched_chunked_decode(codes[..., start : start + size], [size], caches=[cache])
            chunks.append({"new_frames": size, "ms": round((time.perf_counter() - begin) * 1e3)})
            start += size
    per_frame = (plain[50] - plain[25]) / 25
    steady = [chunk["ms"] for chunk in chunks[2:]]
    return {
        "decode_ms": {str(frames): round(ms) for frames, ms in plain.items()},
        "ms_per_decoded_frame": round(per_frame, 1),
        "fixed_ms_per_call": round(plain[25] - 25 * per_frame),
        "stream_chunks": chunks,
        "steady_chunk_ms_per_audio_frame": round(sum(steady) / len(steady) / 25, 1),
    }


# 1 frame (first audio), 5 steady 25-frame chunks (the window fills by the 4th),
# a ragged last chunk; steady = the last three full chunks.
STREAM_CHUNKS = (1, 25, 25, 25, 25, 25, 5)


def code2wav_stream(torch: Any, model: Path) -> dict[str, Any]:
    """Streaming decode vs vLLM-Omni's recompute path, per dtype, ms per new frame."""
    from omni_cpu.models.code2wav import StreamState

    decoder, groups = load_decoder(torch, model)
    frames = sum(STREAM_CHUNKS)
    codes = torch.randint(0, 2048, (1, groups, frames), generator=torch.Generator().manual_seed(0))
    result: dict[str, Any] = {"chunks": list(STREAM_CHUNKS)}
    for name in ("float32", "bfloat16"):
        decoder.to(getattr(torch, name))  # in place: float32 first, then bfloat16
        decoder.precompute_snake_caches()
        state = StreamState(decoder)
        cache: dict[str, Any] = {"prefix_frames": 0}
        paths: dict[str, Callable[[Any], Any]] = {
            "stream": state.decode,
            "recompute": lambda chunk, c=cache, d=decoder: d.batched_chunked_decode(
                chunk, [chunk.shape[-1]], caches=[c]
            )[0],
        }
        with torch.inference_mode():
            whole = decoder(codes).float().reshape(-1)
            row: dict[str, Any] = {}
            for path, decode in paths.items():
                ms, pieces, start = [], [], 0
                for size in STREAM_CHUNKS:
                    begin = time.perf_counter()
                    pieces.append(decode(codes[..., start : start + size]).float().reshape(-1))
                    ms.append((time.perf_counter() - begin) * 1e3)
                    start += size
                steady = [ms[i] / STREAM_CHUNKS[i] for i in range(3, 6)]
                row[path] = {
                    "steady_ms_per_frame": round(sorted(steady)[1], 1),
                    "last_chunk_ms": round(ms[-1]),
                    "max_abs_vs_whole": float(f"{(torch.cat(pieces) - whole).abs().max():.2g}"),
                }
            row["stream_speedup"] = round(
                row["recompute"]["steady_ms_per_frame"] / row["stream"]["steady_ms_per_frame"], 2
            )
        result[name] = row
    return result


def cpu_isa() -> dict[str, Any]:
    """The CPU model and the bf16-relevant ISA flags (Linux /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
    return {"model": model, "flags": [flag for flag in wanted if flag in flags]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "checkpoints" / "0.6b")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one stage's)")
    parser.add_argument("--no-record", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument(
        "--only",
        choices=("all", "code2wav-stream", "code-predictor-step"),
        default="all",
        help="run one part",
    )
    parser.add_argument(
        "--rounds", type=int, default=10, help="code-predictor-step: timed rounds per forward"
    )
    args = parser.parse_args(argv)
    if not (args.model / "config.json").exists():
        print(
            f"stage_micro: no checkpoint at {args.model} "
            f"(make one: .venv/bin/omni-cpu make-checkpoint --size 0.6b --out {args.model})",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the JSON only
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(),
        "cpu": cpu_isa(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "threads": args.threads,
        "model": str(args.model),
    }
    if args.only == "all":
        predictor, config = code_predictor(torch, args.model)
        result["weight_streaming"] = weight_streaming(torch, config)
        result["code_predictor"] = predictor
        result["code2wav"] = code2wav(torch, args.model)
    if args.only == "code-predictor-step":
        result["code_predictor_step"] = code_predictor_step(torch, args.model, args.rounds)
    else:
        result["code2wav_stream"] = code2wav_stream(torch, args.model)
    result["command"] = " ".join(["python", "benchmarks/stage_micro.py", *(argv or sys.argv[1:])])
    text = json.dumps(result, indent=2)
    print(text)
    if not args.no_record and args.only != "all" and RESULTS.exists():
        # One part re-measured: keep the rest of the record, this part with its own stamp.
        recorded = json.loads(RESULTS.read_text())
        part = args.only.replace("-", "_")
        recorded[part] = {
            **{key: result[key] for key in ("date", "cpu", "load_average", "threads", "model")},
            **result[part],
            "command": result["command"],
        }
        text = json.dumps(recorded, indent=2)
    if not args.no_record:
        RESULTS.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
