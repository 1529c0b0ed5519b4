"""Regenerate profiles/ from real machines' dumps in ../shared/sysroots (`make profiles`),
and the README's table of their predicted capacity.

tests/plan/test_dumps.py fails while the checked-in files (or the README's table) differ
from what this writes, so a planner change always shows up in review as a profile diff.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from omni_cpu.hardware.probe import read_facts  # noqa: E402
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile  # noqa: E402
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
README = REPO_ROOT / "README.md"
# The README's capacity table sits between these lines.
TABLE_START = "<!-- capacity table: make profiles writes it -->"
TABLE_END = "<!-- end of capacity table -->"
# int8 is an x86 weight format with AVX2 at least (FBGEMM or omni-cpu's W8A8 GEMV).
INT8_ISA = ("avx2",)


def example_profile_text(sysroot: Path) -> str:
    """The profile omni-cpu plans for the 0.6B model on a dump."""
    return dump_profile(plan_profile(read_facts(sysroot), footprint_for_model(MODEL)))


def capacity_rows(roots: dict[str, Path]) -> list[str]:
    """Markdown rows: each example profile's predicted capacity, and int8's where it runs."""
    from omni_cpu.plan.capacity import isa_class

    rows = [
        "| profile | replicas | talker weights | streams in real time | RTF, 1 stream "
        "| first audio | talker step, 1 / max_num_seqs streams | what stops more (replica 0) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dump_id, filename in EXAMPLES.items():
        facts = read_facts(roots[dump_id])
        formats = ["model"] + (["int8"] if any(f in facts.isa for f in INT8_ISA) else [])
        for weights in formats:
            profile = plan_profile(facts, footprint_for_model(MODEL), PlanOptions(weights=weights))
            own = profile.replicas[0].capacity
            label = f"`{filename}` ({isa_class(facts.architecture, facts.isa)})"
            rows.append(
                f"| {label if weights == 'model' else f'`{filename}`'} | {len(profile.replicas)} "
                f"| {profile.capacity.weights} | {profile.capacity.realtime_streams} "
                f"| {own.rtf_one_stream:.2f} | {own.ttfa_s:.2f} s "
                f"| {own.talker_step_ms:.0f} / {own.talker_step_ms_at_max_seqs:.0f} ms "
                f"({own.max_num_seqs}) | {own.limit} |"
            )
    return rows


def readme_with_table(readme: str, rows: list[str]) -> str:
    """The README with its capacity table replaced by `rows`."""
    head, rest = readme.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return head + TABLE_START + "\n" + "\n".join(rows) + "\n" + TABLE_END + tail


def main() -> None:
    if not sysroots.available():
        sys.exit(f"error: {sysroots.MISSING_REASON}")
    dumps = {dump.id: dump for dump in sysroots.load_dumps()}
    PROFILES_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        roots = {}
        for dump_id, filename in EXAMPLES.items():
            root = roots[dump_id] = sysroots.unpack(dumps[dump_id].tarball, Path(scratch) / dump_id)
            (PROFILES_DIR / filename).write_text(example_profile_text(root))
            print(f"wrote profiles/{filename}")
        README.write_text(readme_with_table(README.read_text(), capacity_rows(roots)))
        print("wrote README.md's capacity table")


if __name__ == "__main__":
    main()
