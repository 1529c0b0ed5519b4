"""The light commands never import the inference runtime: they stay fast, and run without it.

`omni-cpu probe`, `validate`, `diff`, every `--dry-run`, reading this machine's
facts and printing the knob table are floors 0-3 of ARCHITECTURE.md. Each runs in
a fresh interpreter (other tests in this session import torch themselves), to the
end, and then none of torch, vLLM, vLLM-Omni and transformers may be loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import REPO

RUNTIME = ("torch", "vllm", "vllm_omni", "transformers")


def _cli(*args: str) -> str:
    return f"from omni_cpu.cli import app\nstatus = app({list(args)!r}, standalone_mode=False)\n"


def entry_points(profile: Path, checkpoint: Path) -> dict[str, str]:
    """Each light entry point as the Python that runs it; it leaves its exit status in `status`."""
    model = str(checkpoint)
    return {
        "probe": _cli("probe", "--json"),
        "validate": _cli("validate", str(profile)),
        "diff": _cli("diff", str(profile), str(profile)),  # exit 1 means they differ
        "run --dry-run": _cli("run", "--model", model, "--text", "Hi", "--dry-run", "--json"),
        "serve --dry-run": _cli(
            *("serve", "--model", model, "--deploy-profile", str(profile), "--dry-run")
        ),
        "tune --dry-run": _cli("tune", "--model", model, "--dry-run", "--json"),
        "read_facts": "from omni_cpu.hardware import read_facts\nread_facts('/')\nstatus = 0\n",
        "knob table": (
            "import runpy\nrunpy.run_module('omni_cpu.envs', run_name='__main__')\nstatus = 0\n"
        ),
    }


@pytest.fixture(scope="module")
def profile_here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile planned for this machine, as `omni-cpu probe --output` writes it."""
    from omni_cpu.plan import plan_for_machine
    from omni_cpu.profile import save_profile

    path = tmp_path_factory.mktemp("light") / "deploy.yaml"
    save_profile(plan_for_machine("tiny")[1], path)
    return path


@pytest.mark.parametrize("name", list(entry_points(Path(), Path())))
def test_a_light_entry_point_imports_no_runtime(
    name: str, profile_here: Path, tiny_checkpoint: Path
) -> None:
    code = (
        "import sys\n"
        + entry_points(profile_here, tiny_checkpoint)[name]
        + f"loaded = sorted(set({RUNTIME!r}) & {{m.split('.')[0] for m in sys.modules}})\n"
        + "print('RUNTIME=' + ','.join(loaded), file=sys.stderr)\n"
        + "sys.exit(status or 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == "RUNTIME="
