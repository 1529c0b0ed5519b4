"""`omni-cpu probe`, `validate` and `diff` as a user runs them (real processes, real dumps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import sysroots

OMNI_CPU = [sys.executable, "-m", "omni_cpu.cli"]
REPO = Path(__file__).resolve().parent.parent


def omni_cpu(*args: str, env_columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = None if env_columns is None else {**os.environ, "COLUMNS": str(env_columns)}
    return subprocess.run(
        [*OMNI_CPU, *args], capture_output=True, text=True, cwd=REPO, timeout=120, env=env
    )


def test_probe_json_on_this_machine_keeps_the_documented_contract():
    done = omni_cpu("probe", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    facts, profile = data["facts"], data["profile"]
    for key in ("architecture", "sockets", "cores_per_socket", "threads_per_core",
                "online_cpus", "numa_nodes", "isa", "limits"):  # fmt: skip
        assert key in facts
    assert {"id", "cpus", "memory_bytes"} <= set(facts["numa_nodes"][0])
    assert profile["dtype"] in ("bfloat16", "float32")
    assert [stage["stage_id"] for stage in profile["stages"]] == [0, 1]


def test_probe_puts_every_cpu_of_this_machine_to_work():
    data = json.loads(omni_cpu("probe", "--json").stdout)
    usable = data["profile"]["machine"]["usable_cpus"]
    bound = ",".join(stage["cpus"] for stage in data["profile"]["stages"])
    frontend = data["profile"]["replicas"][0]["frontend_cpus"]
    from omni_cpu.cpulist import parse_cpu_list

    assert set(parse_cpu_list(bound)) | set(parse_cpu_list(frontend)) == set(parse_cpu_list(usable))


def test_probe_writes_a_profile_that_validates_here(tmp_path):
    profile = tmp_path / "deploy.yaml"
    assert omni_cpu("probe", "--output", str(profile)).returncode == 0
    done = omni_cpu("validate", str(profile))
    assert done.returncode == 0, done.stderr
    assert "fits this machine" in done.stdout


def test_validate_reports_cpus_this_machine_lacks_and_exits_5(tmp_path):
    from omni_cpu.cpulist import parse_cpu_list
    from omni_cpu.hardware.probe import read_facts
    from omni_cpu.profile import load_profile

    profile = tmp_path / "deploy.yaml"
    omni_cpu("probe", "--stages", "2", "--output", str(profile))
    code2wav = load_profile(profile).stages[1].cpus
    # One past the last CPU this host could ever have: whatever its size.
    absent = max(parse_cpu_list(read_facts().possible_cpus or "0")) + 1
    text = profile.read_text().replace(f'cpus: "{code2wav}"', f'cpus: "{code2wav},{absent}"')
    profile.write_text(text)
    done = omni_cpu("validate", str(profile))
    # Every planned core is taken: the stage's extra CPU cannot bind anywhere here.
    assert done.returncode == 5
    assert f"CPU {absent} (replica 0 code2wav) not here" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_bad_profile_is_one_line_error_with_exit_2(tmp_path):
    profile = tmp_path / "deploy.yaml"
    profile.write_text("omni_cpu: {schema_version: 7}\n")
    done = omni_cpu("validate", str(profile))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "error:" in done.stderr


def test_diff_of_two_plans_shows_changes_and_exits_1(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    omni_cpu("probe", "--output", str(a))
    omni_cpu("probe", "--output", str(b), "--max-seqs", "2")
    same = omni_cpu("diff", str(a), str(a))
    assert same.returncode == 0 and "no differences" in same.stdout
    done = omni_cpu("diff", str(a), str(b), "--json")
    assert done.returncode == 1
    keys = {change["key"] for change in json.loads(done.stdout)}
    assert "stages[0].max_num_seqs" in keys


def test_probe_reads_a_dump_with_sysroot(unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    done = omni_cpu("probe", "--sysroot", str(unpacked_dumps.root(dump)), "--json")
    data = json.loads(done.stdout)
    assert data["facts"]["online_cpus"] == "0-95"
    assert len(data["profile"]["replicas"]) == 8


def test_probe_json_says_where_each_disputed_count_came_from(unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    done = omni_cpu("probe", "--sysroot", str(unpacked_dumps.root(dump)), "--json")
    facts = json.loads(done.stdout)["facts"]
    assert facts["sockets"] == 2
    assert facts["sockets_source"] == "package sibling lists (package_cpus / core_siblings)"
    assert facts["numa_count_basis"] == "nodes holding CPUs or memory"


def test_probe_of_another_machine_prints_its_capacity_and_assumptions(unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    root = str(unpacked_dumps.root(dump))
    args = ("probe", "--sysroot", root, "--model", "0.6b", "--weights", "int8")
    table = omni_cpu(*args, "--json")
    assert table.returncode == 0, table.stderr
    profile = json.loads(table.stdout)["profile"]
    capacity = profile["capacity"]
    assert (capacity["source"], capacity["weights"]) == ("built-in", "int8")
    assert capacity["realtime_streams"] == sum(
        replica["capacity"]["realtime_streams"] for replica in profile["replicas"]
    )
    for replica in profile["replicas"]:
        assert {"rtf_one_stream", "ttfa_s", "realtime_streams", "limit"} <= set(replica["capacity"])
    text = omni_cpu(*args, env_columns=200).stdout
    assert "Predicted capacity (built-in, int8 weights)" in text
    assert "GB/s per core" in text and "CPU class AVX2" in text
    assert text.count("assumes:") == len(capacity["assumptions"])


def test_probe_shows_what_each_weight_format_gives_and_which_plays(unpacked_dumps):
    from omni_cpu import weight_formats

    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    args = ("probe", "--sysroot", str(unpacked_dumps.root(dump)), "--model", "0.6b")
    data = json.loads(omni_cpu(*args, "--json").stdout)
    rows = {row["weights"]: row for row in data["formats"]}
    assert list(rows) == weight_formats.runnable("x86_64", data["facts"]["isa"])
    own = data["profile"]["replicas"][0]["capacity"]
    chosen = rows["model"]
    assert chosen["chosen"] and not rows["int4"]["chosen"]
    assert (chosen["rtf_one_stream"], chosen["safe_start_s"]) == (
        own["rtf_one_stream"],
        own["safe_start_s"],
    )
    assert chosen["stall_free_streams"] == 0 < rows["int4"]["stall_free_streams"]
    assert data["formats_hint"].startswith("--weights model plays no stream without a gap")
    assert "check-weights --model DIR --weights int4" in data["formats_hint"]
    text = omni_cpu(*args, env_columns=200).stdout
    assert "Each weight format here (predicted, built-in; chosen: model)" in text
    for name, row in rows.items():
        line = next(x for x in text.splitlines() if x.startswith(f"│ {name} "))
        assert f"{row['rtf_one_stream']:.2f}" in line and f"{row['safe_start_s']:.2f} s" in line
    assert f"hint: {data['formats_hint']}" in " ".join(text.split())
    # int4 chosen plays: the table stays, the hint goes.
    int4 = json.loads(omni_cpu(*args, "--weights", "int4", "--json").stdout)
    assert [row["chosen"] for row in int4["formats"]] == [False, False, True]
    assert int4["formats_hint"] is None


def test_probe_says_first_after_the_plan_that_another_format_keeps_up(unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    args = ("probe", "--sysroot", str(unpacked_dumps.root(dump)), "--model", "0.6b")
    data = json.loads(omni_cpu(*args, "--json").stdout)
    headline = data["formats_headline"]
    assert headline is not None and " cannot keep up here (RTF " in headline
    assert "; --weights int4 plays from " in headline
    lines = omni_cpu(*args, env_columns=200).stdout.splitlines()
    at = lines.index(headline)
    assert lines[at - 1].startswith("└")  # the plan's table ends just above it
    assert lines[at + 1].startswith("Predicted capacity")
    assumes = [index for index, line in enumerate(lines) if line.startswith("assumes:")]
    hint = next(index for index, line in enumerate(lines) if line.startswith("hint:"))
    assert assumes and min(assumes) > hint > at  # the assumptions come last, for who reads on


def test_help_teaches_with_examples():
    for command in ("probe", "validate", "diff", "doctor"):
        done = omni_cpu(command, "--help")
        assert done.returncode == 0
        assert "Example" in done.stdout, command


def test_unknown_option_is_a_usage_error_with_exit_2():
    assert omni_cpu("probe", "--no-such-option").returncode == 2
