"""A cache hit against a cache miss, back to back: does the packed-weight cache slow decode?

Runs `omni-cpu bench` (one stream, 124 frames by default) alternately with the
packed-weight cache off (every layer packed at this start) and on (the entry the
first run wrote, mapped at start: a hit), for --rounds pairs, and prints each run's
talker step, code predictor share, code2wav per frame and RTF, then the hit's
median over the miss's. Back to back in one sitting, so a busy host moves both alike.

    .venv/bin/python benchmarks/weight_cache_speed.py --model checkpoints/0.6b --weights int4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

FIELDS = ("talker_step_ms", "code_predictor_ms", "code2wav_ms_per_frame", "rtf_p50")


def one_run(model: str, weights: str, frames: int, cache: str | None) -> dict[str, Any]:
    """One `bench` run's one-stream level, with OMNI_CPU_WEIGHT_CACHE set to `cache`."""
    env = dict(os.environ)
    if cache is None:
        env.pop("OMNI_CPU_WEIGHT_CACHE", None)
    else:
        env["OMNI_CPU_WEIGHT_CACHE"] = cache
    command = [
        str(Path(sys.executable).with_name("omni-cpu")),
        "bench",
        "--model",
        model,
        "--weights",
        weights,
        "--concurrency",
        "1",
        "--frames",
        str(frames),
        "--warmup",
        "1",
        "--json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    data = json.loads(done.stdout)
    level = data["levels"][0]
    talker = data["startup"].get("stages", {}).get("talker", {})
    return {
        "weight_cache": talker.get("weight_cache"),
        **{name: level[name] for name in FIELDS},
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each field over the hits and over the misses, and hit / miss."""
    by_kind = {
        kind: [run for run in runs if (run["weight_cache"] == "hit") == (kind == "hit")]
        for kind in ("hit", "miss")
    }
    out: dict[str, Any] = {}
    for name in FIELDS:
        medians = {
            kind: statistics.median(run[name] for run in chosen if run[name] is not None)
            for kind, chosen in by_kind.items()
            if any(run[name] is not None for run in chosen)
        }
        ratio = medians["hit"] / medians["miss"] if len(medians) == 2 and medians["miss"] else None
        out[name] = {**medians, "hit_over_miss": None if ratio is None else round(ratio, 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="checkpoints/0.6b")
    parser.add_argument("--weights", default="int4", choices=("int8", "int4", "model"))
    parser.add_argument("--frames", type=int, default=124)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    runs = []
    for round_ in range(args.rounds):
        for label, cache in (("miss", "off"), ("hit", None)):
            run = one_run(args.model, args.weights, args.frames, cache)
            runs.append(run)
            shown = ", ".join(f"{name} {run[name]}" for name in FIELDS)
            print(f"round {round_ + 1} {label} ({run['weight_cache']}): {shown}", file=sys.stderr)
    print(json.dumps({"runs": runs, "summary": summarize(runs)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
