"""code2wav's one-pass SnakeBeta and its streaming decoder, at one and two threads.

SnakeBeta (y = x + inv_beta * sin(alpha * x)^2 per channel) on the 0.6B codec's four
vocoder shapes for a 10-frame chunk, bf16 and float32, through:
- omni-cpu's kernel (omni_cpu/kernels/csrc/snake.cpp), AVX-512 module and AVX2 module (the
  AVX2 one runs on any AVX2 CPU, so an AVX-512 box measures both);
- torch, as vLLM-Omni's SnakeBeta runs it on a CPU (its eager forward: five passes); vLLM-Omni's
  fused kernel is Triton for GPUs only, so torch's is the best library path on a CPU.
Then the whole streaming decode (omni_cpu.models.code2wav) of steady 10-frame chunks, bf16.
Reports the median of --repeats calls, in ms. No AMX path exists for either (elementwise work
and oneDNN's convolutions), so the rows are the same on an AMX CPU.

    .venv/bin/python benchmarks/code2wav_kernels.py --threads 1
    .venv/bin/python benchmarks/code2wav_kernels.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

# (channels, samples) of a 10-frame chunk at each decoder block's output rate.
SHAPES = [(768, 320), (384, 1600), (192, 6400), (96, 19200)]


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def snake_rows(repeats: int) -> None:
    from vllm_omni.model_executor.models.common.snake_activation import SnakeBeta

    from omni_cpu.kernels import build

    modules = {b.name: build.load(b) for b in (build.AVX512, build.avx2_build()) if b.runs_here()}
    print(
        "| shape (C x L) | dtype | torch (vLLM-Omni's SnakeBeta) | "
        + " | ".join(f"omni-cpu {name}" for name in modules)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(modules))
    for channels, length in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            act = SnakeBeta(channels).to(dtype)
            with torch.no_grad():
                act.alpha.uniform_(-1, 1)
                act.beta.uniform_(-1, 1)
            act.precompute_exp_cache()
            x = torch.randn(1, channels, length).to(dtype)  # torch's layout
            steps = x.transpose(1, 2).contiguous()  # the kernel's: time-major
            cells = [median_ms(lambda act=act, x=x: act(x), repeats)]
            for module in modules.values():
                cells.append(median_ms(
                    lambda m=module, s=steps, a=act: m.snake_beta(
                        s, a._exp_alpha, a._inv_beta, None
                    ),
                    repeats,
                ))  # fmt: skip
            row = " | ".join(f"{ms:.2f} ms" for ms in cells)
            print(f"| {channels} x {length} | {str(dtype).removeprefix('torch.')} | {row} |")


def decoder_row(repeats: int) -> None:
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as tokenizer_config,
    )
    from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as tokenizer_model,
    )

    from omni_cpu.checkpoint.configs import speech_tokenizer_config
    from omni_cpu.models.code2wav import StreamState

    config = tokenizer_config.Qwen3TTSTokenizerV2Config(**speech_tokenizer_config("0.6b"))
    decoder = tokenizer_model.Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    decoder.eval().precompute_snake_caches()
    decoder = decoder.to(torch.bfloat16)
    codes = torch.randint(0, 2048, (1, 16, 10), generator=torch.Generator().manual_seed(0))
    stream = StreamState(decoder)
    with torch.inference_mode():
        for _ in range(4):  # allocation, and the decode packs the shape's weights
            stream.decode(codes)
        ms = median_ms(lambda: stream.decode(codes), repeats)
    print(f"\nstreaming decode, bf16, steady 10-frame chunks: {ms / 10:.1f} ms a frame")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads: {torch.get_num_threads()}\n")
    with torch.inference_mode():
        snake_rows(args.repeats)
    decoder_row(max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
