"""torchvision/torchaudio beside the +cpu torch: the installed runtime and the repair logic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omni_cpu.runtime import companions
from omni_cpu.runtime.companions import (
    ABSENT,
    NATIVE_BROKEN,
    NATIVE_OK,
    PTH_LINE,
    PURE_PYTHON,
    Companion,
)


def test_pth_line_is_one_import_line_that_site_executes() -> None:
    # `site` runs a .pth line only when it starts with "import" and is a single line.
    assert PTH_LINE.startswith("import ") and PTH_LINE.count("\n") == 1


def test_pth_line_is_harmless_without_omni_cpu() -> None:
    code = "import sys; sys.modules['omni_cpu'] = None\n" + PTH_LINE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_broken_native_library_is_a_problem() -> None:
    broken = Companion("torchaudio", "2.11.1", NATIVE_BROKEN, ("/x/_torchaudio.so",))
    assert companions.problems([broken]) == ["torchaudio 2.11.1: native library cannot load"]


def test_missing_torchvision_is_a_problem() -> None:
    assert companions.problems([Companion("torchvision", None, ABSENT, ())]) == [
        "torchvision is missing (transformers' image processors import it)"
    ]


def test_a_hook_naming_an_older_module_is_a_problem(tmp_path, monkeypatch) -> None:
    # An upgrade moved the hook's module: the old line fails at every interpreter start.
    hook = tmp_path / companions.PTH_NAME
    monkeypatch.setattr(companions, "pth_path", lambda: hook)
    pure = [Companion("torchvision", "0.28.0", PURE_PYTHON, ())]
    hook.write_text(PTH_LINE.replace("omni_cpu.runtime.", "omni_cpu.platform."))
    assert companions.problems(pure) == [
        f"torchvision without native ops needs {hook} (as this omni-cpu writes it)"
    ]
    hook.write_text(PTH_LINE)
    assert companions.problems(pure) == []


def test_cpu_builds_and_absent_torchcodec_are_fine() -> None:
    found = [
        Companion("torchvision", "0.28.0+cpu", NATIVE_OK, ("/x/_C.so",)),
        Companion("torchaudio", "2.11.1+cpu", NATIVE_OK, ("/x/_torchaudio.so",)),
        Companion("torchcodec", None, ABSENT, ()),
    ]
    assert companions.problems(found) == []


@pytest.mark.cpu
def test_installed_runtime_has_no_companion_problems() -> None:
    pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")
    found = [companions.inspect(name) for name in ("torchvision", "torchaudio", "torchcodec")]
    assert companions.problems(found) == []
    assert {c.name: c.state for c in found}["torchvision"] in (PURE_PYTHON, NATIVE_OK)


@pytest.mark.cpu
def test_torchvision_import_defines_only_schemas_without_kernels() -> None:
    pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")
    code = (
        "import torch, torchvision, torchvision.extension as e\n"
        "print(e._has_ops(), torch._C._dispatch_has_kernel_for_dispatch_key("
        "'torchvision::nms', 'CPU'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    has_ops, has_cpu_kernel = done.stdout.split()
    if has_ops == "False":  # pure-Python torchvision: schemas only, calls fail loudly
        assert has_cpu_kernel == "False"
