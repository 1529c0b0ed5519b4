"""Regenerate profiles/ from real machines' dumps in ../shared/sysroots (`make profiles`).

tests/plan/test_example_profiles.py fails while the checked-in files differ from
what this writes, so a planner change always shows up in review as a profile diff.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from omni_cpu.hardware.probe import read_facts  # noqa: E402
from omni_cpu.plan import footprint_for_model, plan_profile  # noqa: E402
from omni_cpu.profile import dump_profile  # noqa: E402
from tests import sysroots  # noqa: E402

PROFILES_DIR = REPO_ROOT / "profiles"
# Dump id -> profile file: a 2-socket 8-node EPYC, the sparse-node 64-CPU Xeon,
# ARM big.LITTLE, and the 2-core Zen 5 this project is developed on.
EXAMPLES = {
    "ul-x86_64-epyc_7451": "epyc-7451-2s-8node.yaml",
    "ul-x86_64-64cpu": "xeon-x7550-4s-sparse-nodes.yaml",
    "ul-arm-A510-A710-A715-X3": "arm-big-little-8cpu.yaml",
    "x86_64-zen5-kvm-2c": "zen5-kvm-2core.yaml",
}
MODEL = "0.6b"


def example_profile_text(sysroot: Path) -> str:
    """The profile omni-cpu plans for the 0.6B model on a dump."""
    return dump_profile(plan_profile(read_facts(sysroot), footprint_for_model(MODEL)))


def main() -> None:
    if not sysroots.available():
        sys.exit(f"error: {sysroots.MISSING_REASON}")
    dumps = {dump.id: dump for dump in sysroots.load_dumps()}
    PROFILES_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for dump_id, filename in EXAMPLES.items():
            root = sysroots.unpack(dumps[dump_id].tarball, Path(scratch) / dump_id)
            (PROFILES_DIR / filename).write_text(example_profile_text(root))
            print(f"wrote profiles/{filename}")


if __name__ == "__main__":
    main()
