"""The wheel carries its kernels: every variant of the build machine's architecture, built ahead.

pyproject.toml says everything else. A wheel's build in the runtime's venv (`python -m build
--wheel --no-isolation`, `pip wheel --no-build-isolation --no-deps .`) runs `python -m
omni_cpu.kernels.build --all` into omni_cpu/kernels/prebuilt/ before copying the package:
the modules link against that venv's torch, and its version keys them
(omni_cpu.kernels.build.prebuilt_path). An isolated build (pip's default) has no torch (torch
+cpu is not on PyPI): its wheel is pure Python, and runs compile the kernels on first use.
An editable install (`pip install -e .`, scripts/setup.sh) builds nothing here: `make setup`
builds the one this CPU uses, and OMNI_CPU_PROBE_ONLY=1 needs neither torch nor a compiler.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


@functools.cache
def _kernel_builds():
    """This tree's omni_cpu/kernels/build.py (stdlib only at import), by its path: an omni_cpu
    imported already (a venv's .pth hook imports an installed one) must not answer."""
    spec = importlib.util.spec_from_file_location(
        "_omni_cpu_kernel_builds", ROOT / "omni_cpu" / "kernels" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _builds_kernels() -> bool:
    """This architecture has modules and torch is here to build them against."""
    return bool(_kernel_builds().variants()) and importlib.util.find_spec("torch") is not None


class KernelDistribution(Distribution):
    """A platform wheel (cp3XX-linux_<arch>) where it carries compiled modules."""

    def has_ext_modules(self) -> bool:
        return _builds_kernels()


class BuildPyWithKernels(build_py):
    """build_py that first builds every kernel variant into the package's prebuilt/."""

    def run(self) -> None:
        if not self.editable_mode:
            if _builds_kernels():
                # This tree first: the child's .pth hooks then import its omni_cpu.
                paths = (str(ROOT), os.environ.get("PYTHONPATH", ""))
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
                command = [sys.executable, "-m", "omni_cpu.kernels.build", "--all"]
                subprocess.run(command, cwd=ROOT, env=env, check=True)
            else:
                print(
                    "omni-cpu: no torch in this build's environment: the wheel carries no"
                    " prebuilt kernels (build it with --no-isolation in the runtime's venv)",
                    file=sys.stderr,
                )
        super().run()

    def find_data_files(self, package: str, src_dir: str) -> list[str]:
        """The package's data files; without torch not the modules a checkout built ahead,
        which a pure wheel must not carry."""
        files = super().find_data_files(package, src_dir)
        if _builds_kernels():
            return files
        return [name for name in files if "prebuilt" not in Path(name).parts]


setup(distclass=KernelDistribution, cmdclass={"build_py": BuildPyWithKernels})
