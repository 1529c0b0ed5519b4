"""Can we vouch for int8? Per-layer error and the share of greedy codes equal to bf16.

On the 0.6B code predictor's real shapes and classes (vLLM-Omni 0.30.0), random
weights N(0, 0.02), the fused forward omni-cpu runs by default:
1. per-layer relative error of each int8 scheme against the float32 product, on the
   predictor's own 21 linears (activations N(0, 1));
2. over N frames (default 200) of random talker states, the share of the 15 greedy
   residual codes per frame equal to the bf16 run's, per scheme, and the share of
   frames whose 15 codes are all equal (omni_cpu.quality.figures.code_agreement, the
   figure `omni-cpu check-weights` reports on a real checkpoint's real talker states).
   A code depends on the codes before it, so a flip early in a frame changes the
   rest: the per-frame share is the strict one.

"float32" (the same weights in float32) is the yardstick: how often bf16 rounding
alone flips a code. Schemes: "gemv-w8a8" (omni-cpu's VNNI kernel, 8-bit activations,
32-bit sums), "gemv-w4a8" (its int4 weights, groups of 32) and "fbgemm-int8"
(PyTorch's dynamic int8, 7-bit activations). The talker's own layer-0
code is not part of this (it needs the engines); the predictor is where 15 of the 16
codes of a frame are chosen.

    .venv/bin/python benchmarks/int8_agreement.py [--frames 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import types
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(torch, config, talker, dtype):
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
        Qwen3TTSTalkerConfig,
    )
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
        Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM as CodePredictor,
    )

    torch.manual_seed(0)
    predictor = CodePredictor(
        vllm_config=types.SimpleNamespace(model_config=None),
        config=config,
        talker_config=Qwen3TTSTalkerConfig(**talker),
    ).eval()
    with torch.no_grad():
        for parameter in predictor.parameters():
            parameter.normal_(0.0, 0.02)
    return predictor.to(dtype)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "checkpoints" / "0.6b")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--json", dest="json_path", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    warnings.filterwarnings("ignore")
    import torch
    from torch import nn
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import (
        Qwen3TTSTalkerCodePredictorConfig,
    )

    from omni_cpu.kernels import fbgemm, gemv
    from omni_cpu.models import int8, linears
    from omni_cpu.models import predictor as dispatcher
    from omni_cpu.quality.figures import code_agreement

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    talker = json.loads((args.model / "config.json").read_text())["talker_config"]
    config = Qwen3TTSTalkerCodePredictorConfig(**talker["code_predictor_config"])
    width = int(talker["hidden_size"])
    schemes = {}
    if gemv.kernel() is not None:
        module = gemv.kernel()
        schemes["gemv-w8a8"] = lambda w: gemv.PackedInt8Weights(w, module)
        schemes["gemv-w4a8"] = lambda w: gemv.PackedInt4Weights(w, module)
    if fbgemm.int8_supported():
        schemes["fbgemm-int8"] = fbgemm.Int8Weights

    # 1. Per-layer error on the predictor's own weights.
    reference = build(torch, config, talker, torch.float32)
    layer_error: dict[str, dict[str, float]] = {name: {} for name in schemes}
    for name, linear in reference.named_modules():
        if not isinstance(linear, nn.Linear):
            continue
        x = torch.randn(4, linear.in_features, generator=torch.Generator().manual_seed(1))
        want = x @ linear.weight.detach().t()
        for scheme, make in schemes.items():
            got = make(linear.weight.detach())(x)
            layer_error[scheme][name] = float((got - want).norm() / want.norm())

    # 2. Greedy codes against bf16.
    def forward_for(scheme: str | None):
        dtype = torch.float32 if scheme == "float32" else torch.bfloat16
        predictor = build(torch, config, talker, dtype)
        if scheme in (None, "float32"):
            linears.route_linears(predictor, "model")
        else:
            for parent in list(predictor.modules()):
                for child_name, child in list(parent.named_children()):
                    if isinstance(child, nn.Linear) and int8.worth_quantizing(child.weight):
                        weights = schemes[scheme](child.weight)
                        setattr(parent, child_name, linears.RoutedLinear(child, scheme, weights))
            linears.route_linears(predictor, "model")  # what is left (small heads)
        dispatcher.install_forward(predictor, "fused")
        return predictor

    generator = torch.Generator().manual_seed(2)
    frames = [
        {
            "layer0_code": torch.randint(0, config.vocab_size, (1, 1), generator=generator),
            "layer0_embed": torch.randn(1, 1, width, generator=generator),
            "last_talker_hidden": torch.randn(1, 1, width, generator=generator),
        }
        for _ in range(args.frames)
    ]
    bf16 = forward_for(None)
    base = [bf16.forward(**frame, do_sample=False)[0, 1:] for frame in frames]
    agreement = {}
    # float32 against bf16 is the yardstick: how often rounding alone flips a code.
    for scheme in ["float32", *schemes]:
        predictor = forward_for(scheme)
        codes = [predictor.forward(**frame, do_sample=False)[0, 1:] for frame in frames]
        agreement[scheme] = code_agreement(codes, base)
    result = {
        "frames": args.frames,
        "layer_error_median": {
            scheme: round(sorted(errors.values())[len(errors) // 2], 4)
            for scheme, errors in layer_error.items()
        },
        "layer_error_max": {
            scheme: round(max(errors.values()), 4) for scheme, errors in layer_error.items()
        },
        "agreement_with_bf16": agreement,
    }
    print(json.dumps(result, indent=2))
    if args.json_path:
        args.json_path.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
