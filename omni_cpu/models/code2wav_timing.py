"""code2wav's cost on this core: ms per decoded frame and per decoder call, per dtype.

For `probe --calibrate` (omni_cpu.bench.calibrate runs this module as a child process
it can kill at its budget: `python -m omni_cpu.models.code2wav_timing SECONDS`). It
builds vLLM-Omni's 0.6B decoder (random weights; speed does not depend on them) and
times omni-cpu's streaming decode (omni_cpu.models.code2wav) as the stage runs it.
Each result is printed as a JSON line as soon as it is measured, so what finished
survives a kill.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

# Two chunk lengths: the difference between them is the per-frame cost, the rest the call's.
CODE2WAV_FRAMES = (2, 6)


def code2wav_ms(torch: Any, left: Callable[[], float]) -> dict[str, float]:
    """ms per decoded frame ("bfloat16") and per call ("bfloat16:call") on one core per dtype;
    what time allows, {} without vLLM-Omni."""
    try:
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            configuration_qwen3_tts_tokenizer_v2 as tokenizer_config,
        )
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            modeling_qwen3_tts_tokenizer_v2 as tokenizer_model,
        )
    except ImportError:
        return {}
    from omni_cpu.checkpoint.configs import speech_tokenizer_config
    from omni_cpu.models.code2wav import StreamState

    config = tokenizer_config.Qwen3TTSTokenizerV2Config(**speech_tokenizer_config("0.6b"))
    decoder = tokenizer_model.Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    decoder.eval()
    if hasattr(decoder, "precompute_snake_caches"):
        decoder.precompute_snake_caches()
    groups = int(config.decoder_config.num_quantizers)
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (1, groups, max(CODE2WAV_FRAMES)), generator=generator)
    few, many = CODE2WAV_FRAMES
    measured: dict[str, float] = {}
    with torch.inference_mode():
        for name, torch_dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
            if left() < 2.5:
                break
            # omni-cpu's streaming decode, as the stage runs it: chunks that carry the
            # decoder's state on from a first 1-frame chunk.
            stream = StreamState(decoder.to(torch_dtype))
            stream.decode(codes[..., :1])
            times = {frames: float("inf") for frames in (few, many)}
            # The first calls at each length pay for allocation and kernel set-up, and the
            # decode packs a length's weights at its second (omni_cpu.models.code2wav): the
            # best of the calls after two at each length counts, as a stream's steady chunks.
            for attempt in range(4):
                for frames in (few, many):
                    begin = time.perf_counter()
                    stream.decode(codes[..., :frames])
                    if attempt >= 2:
                        times[frames] = min(times[frames], time.perf_counter() - begin)
            if times[many] <= times[few]:
                continue  # noise swamped the difference: keep the constant
            per_frame = (times[many] - times[few]) / (many - few)
            measured[name] = round(per_frame * 1e3, 1)
            call = times[few] - few * per_frame
            if call > 0:
                measured[f"{name}:call"] = round(call * 1e3, 1)
            print(json.dumps(measured), flush=True)  # what is done survives a kill
    return measured


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    deadline = time.perf_counter() + float(sys.argv[1])
    code2wav_ms(torch, lambda: deadline - time.perf_counter())
