"""Let torchvision's pure-Python parts import beside a `+cpu` torch.

Why: PyPI's torchvision wheels are CUDA builds. Their native library links
`libtorch_cuda.so`, which a `+cpu` torch does not have, so it cannot load. vLLM
still needs torchvision to import: transformers 5.x image processors (pulled in
by vLLM's Qwen2-VL family, which vLLM-Omni's model registry imports) use
`torchvision.transforms.v2`, which is pure Python. torchvision copes with a
missing native library everywhere except one place: `_meta_registrations`
registers fake kernels for `torchvision::nms`/`qnms`, which needs those ops'
schemas, and only the native library defines them.

So `scripts/install-runtime.sh` removes torchvision's native files and drops a
`.pth` line that imports this module at interpreter start (cheap: no torch
import here). The finder below waits for `torchvision._meta_registrations` and,
only when the native ops did not load, defines the two schemas first, without
kernels: calling `torchvision.ops.nms` then fails loudly ("no kernel for CPU"),
and nothing in the speech pipeline calls it.

Written against torchvision 0.28.0 (the release for torch 2.13.0); the schemas
are copied from its csrc/ops/nms.cpp and csrc/ops/quantized/cpu/qnms_kernel.cpp.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_TRIGGER = "torchvision._meta_registrations"

# The only schemas torchvision 0.28.0 needs before its fake-kernel registration;
# every other op's registration is skipped when the native library is absent.
TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_library: object | None = None  # keeps the torch.library.Library (and its defs) alive


def define_missing_schemas() -> bool:
    """Define torchvision's nms/qnms schemas if its native library did not. True if it did."""
    global _library
    import torch
    import torchvision.extension

    if torchvision.extension._has_ops() or _library is not None:
        return False
    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in TORCHVISION_SCHEMAS:
        library.define(schema)
    _library = library
    return True


class _BeforeMetaRegistrations(importlib.abc.MetaPathFinder):
    """Runs `define_missing_schemas` just before torchvision registers its fake kernels."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == _TRIGGER:
            define_missing_schemas()
        return None  # the normal finders load the module


def install() -> None:
    """Put the finder first on sys.meta_path (idempotent)."""
    if not any(isinstance(finder, _BeforeMetaRegistrations) for finder in sys.meta_path):
        sys.meta_path.insert(0, _BeforeMetaRegistrations())


install()
