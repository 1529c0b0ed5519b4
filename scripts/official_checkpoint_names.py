"""Write tests/checkpoint/official-names.json: every tensor the official classes hold.

Runs INSIDE benchmarks/.venv-qwen-tts (benchmarks/setup-qwen-tts-venv.sh), where
the PyPI `qwen-tts` 0.1.1 source is installed, never in omni-cpu's venv. For each
checkpoint kind and size that omni-cpu's `make-checkpoint` writes, it takes the
config.json and speech_tokenizer/config.json values from omni_cpu.checkpoint.configs
(plain Python, no dependencies), instantiates `Qwen3TTSForConditionalGeneration`
and `Qwen3TTSTokenizerV2Model` on the meta device (no memory, no weights) and
records the state dict's names, shapes and dtypes in order: the names the official
`from_pretrained` expects to find in model.safetensors and
speech_tokenizer/model.safetensors. tests/checkpoint/test_official_names.py checks
omni-cpu's layouts against this file, so it needs no qwen-tts venv to run.

    benchmarks/.venv-qwen-tts/bin/python scripts/official_checkpoint_names.py
"""

from __future__ import annotations

import contextlib
import json
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "checkpoint" / "official-names.json"
DTYPE_NAMES = {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def _rows(module: object) -> list[list[object]]:
    return [
        [name, list(tensor.shape), DTYPE_NAMES[str(tensor.dtype)]]
        for name, tensor in module.state_dict().items()  # type: ignore[attr-defined]
    ]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    from omni_cpu.checkpoint import configs

    with contextlib.redirect_stdout(sys.stderr):  # qwen-tts prints a flash-attn notice
        from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
        from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Model,
        )

    result: dict[str, object] = {
        "generated_by": f"scripts/official_checkpoint_names.py, qwen-tts "
        f"{metadata.version('qwen-tts')}, transformers {metadata.version('transformers')}",
        "model": {},
        "speech_tokenizer": {},
    }
    for size in configs.SIZES:
        st_config = Qwen3TTSTokenizerV2Config(**configs.speech_tokenizer_config(size))
        with torch.device("meta"):
            torch.set_default_dtype(torch.float32)
            tokenizer = Qwen3TTSTokenizerV2Model(st_config)
        result["speech_tokenizer"][size] = _rows(tokenizer)  # type: ignore[index]
        for kind in configs.KINDS:
            try:
                configs.check_kind(kind, size)
            except ValueError:
                continue  # not published at this size
            config = Qwen3TTSConfig(**configs.model_config(size, kind))
            with torch.device("meta"):
                torch.set_default_dtype(torch.bfloat16)
                model = Qwen3TTSForConditionalGeneration(config)
            torch.set_default_dtype(torch.float32)
            result["model"][f"{kind}/{size}"] = _rows(model)  # type: ignore[index]
            print(
                f"{kind}/{size}: {len(result['model'][f'{kind}/{size}'])} tensors", file=sys.stderr
            )  # type: ignore[index]
    OUT.write_text(json.dumps(result, indent=0, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
