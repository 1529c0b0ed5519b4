"""Regenerate profiles/ from real machines' dumps (`make profiles`), docs/planning.md's
table of their predicted capacity and docs/configuration.md's table of user knobs.

The dumps are the real machines in tests/data/sysroots (their README says where each came
from and its licence).
tests/plan/test_dumps.py fails while the checked-in files (or the capacity table) differ
from what this writes, so a planner change always shows up in review as a profile diff;
tests/test_envs.py fails while the knob table differs from omni_cpu/envs.py.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from omni_cpu import envs, weight_formats  # noqa: E402
from omni_cpu.hardware.probe import read_facts  # noqa: E402
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile  # noqa: E402
from omni_cpu.profile import dump_profile  # noqa: E402
from tests.helpers import sysroots  # noqa: E402

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
PLANNING = REPO_ROOT / "docs" / "planning.md"
CONFIGURATION = REPO_ROOT / "docs" / "configuration.md"
# docs/planning.md's capacity table sits between these lines.
TABLE_START = "<!-- capacity table: make profiles writes it -->"
TABLE_END = "<!-- end of capacity table -->"
# docs/configuration.md's table of user knobs (omni_cpu.envs.markdown_table) sits between these.
ENV_TABLE_START = "<!-- environment variables: make profiles writes it from omni_cpu/envs.py -->"
ENV_TABLE_END = "<!-- end of environment variables -->"


def example_profile_text(sysroot: Path) -> str:
    """The profile omni-cpu plans for the 0.6B model on a dump."""
    return dump_profile(plan_profile(read_facts(sysroot), footprint_for_model(MODEL)))


def capacity_rows(roots: dict[str, Path]) -> list[str]:
    """Markdown rows: each example profile's predicted capacity, and int8's where it runs."""
    from omni_cpu.plan.policy import facts_class

    rows = [
        "| profile | replicas | talker weights | streams in real time | streams without a gap "
        "| RTF, 1 stream | first audio | safe start, 1 stream "
        "| talker step, 1 / max_num_seqs streams | what stops more (replica 0) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dump_id, filename in EXAMPLES.items():
        facts = read_facts(roots[dump_id])
        int8 = weight_formats.INT8.runs_on(facts.architecture, facts.isa)
        formats = ["model"] + ([weight_formats.INT8.name] if int8 else [])
        for weights in formats:
            profile = plan_profile(facts, footprint_for_model(MODEL), PlanOptions(weights=weights))
            own = profile.replicas[0].capacity
            label = f"`{filename}` ({facts_class(facts)})"
            rows.append(
                f"| {label if weights == 'model' else f'`{filename}`'} | {len(profile.replicas)} "
                f"| {profile.capacity.weights} | {profile.capacity.realtime_streams} "
                f"| {profile.capacity.stall_free_streams} "
                f"| {own.rtf_one_stream:.2f} | {own.ttfa_s:.2f} s | {own.safe_start_s:.2f} s "
                f"| {own.talker_step_ms:.0f} / {own.talker_step_ms_at_max_seqs:.0f} ms "
                f"({own.max_num_seqs}) | {own.limit} |"
            )
    return rows


def with_table(page: str, rows: list[str], start: str = TABLE_START, end: str = TABLE_END) -> str:
    """`page` with the table between `start` and `end` (the capacity table's) as `rows`."""
    head, rest = page.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + "\n".join(rows) + "\n" + end + tail


def with_env_table(page: str) -> str:
    """`page` (docs/configuration.md) with its table of user knobs as omni_cpu.envs declares."""
    return with_table(page, envs.markdown_table(), ENV_TABLE_START, ENV_TABLE_END)


def main() -> None:
    CONFIGURATION.write_text(with_env_table(CONFIGURATION.read_text()))
    print("wrote docs/configuration.md's table of user knobs")
    dumps = {dump.id: dump for dump in sysroots.load_dumps()}
    PROFILES_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        roots = {}
        for dump_id, filename in EXAMPLES.items():
            root = roots[dump_id] = sysroots.unpack(dumps[dump_id].tarball, Path(scratch) / dump_id)
            (PROFILES_DIR / filename).write_text(example_profile_text(root))
            print(f"wrote profiles/{filename}")
        PLANNING.write_text(with_table(PLANNING.read_text(), capacity_rows(roots)))
        print("wrote docs/planning.md's capacity table")


if __name__ == "__main__":
    main()
