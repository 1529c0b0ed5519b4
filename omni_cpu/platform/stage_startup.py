"""Start-up phases measured inside the stage workers, handed to the driver as JSON files.

The driver only sees `Omni()` take its seconds (`engines_s`); what a stage spent
loading weights and packing them happens in the stage's own process. With
`OMNI_CPU_STARTUP_DIR` set (by the driver, for the length of `Omni()`: `collected`),
each stage worker writes `<stage kind>-<pid>.json` once its model is loaded (written
to a temp file and renamed, so a reader never sees half of one), and the driver reads
them back into `startup.stages` of `run --json` / `bench --json`. These phases lie
inside `engines_s`, so `startup.total_s` still sums the driver's phases alone.
Import-light (no torch): the driver imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omni_cpu import envs, weight_formats

# What each stage-side phase is (seconds unless it says otherwise).
STAGE_PHASES = {
    "load_model_s": "the stage runner's load_model, all of it",
    "weights_load_s": "building the model and copying the checkpoint into it (load_model "
    "less packing and the cache write)",
    "pack_s": "quantizing and packing the linears' weights for the GEMV, or mapping them "
    "from the packed-weight cache (near 0 on a hit)",
    "cache_write_s": "writing the packed-weight cache entry (a miss only)",
    "weights": f"the talker's weight format ({', '.join(weight_formats.NAMES)})",
    "weight_cache": "the packed-weight cache: hit, miss, partial, corrupt (an entry was "
    "ignored and rewritten), off, none (no layer on the GEMV)",
    "packed_layers": "linear layers packed in this start",
    "cached_layers": "linear layers mapped from the cache",
    "skipped_loads": "linear layers whose checkpoint tensors were not even copied in (a hit)",
}


def write(kind: str, phases: dict[str, Any]) -> Path | None:
    """This worker's phases, when the driver asked for them (`OMNI_CPU_STARTUP_DIR`)."""
    directory = envs.OMNI_CPU_STARTUP_DIR
    if not directory:
        return None
    folder = Path(directory)
    path = folder / f"{kind}-{os.getpid()}.json"
    temp = folder / f".{path.name}.tmp"
    with contextlib.suppress(OSError):  # a start-up report is never worth failing a stage
        temp.write_text(json.dumps({"kind": kind, "pid": os.getpid(), **phases}))
        os.replace(temp, path)
        return path
    return None


def read(folder: Path) -> dict[str, dict[str, Any]]:
    """Each stage kind's phases found in `folder` (the last written where a kind repeats)."""
    found: dict[str, tuple[float, dict[str, Any]]] = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
            written = path.stat().st_mtime
        except (OSError, ValueError):
            continue  # gone, or not JSON
        if not isinstance(record, dict) or "kind" not in record:
            continue
        kind = str(record.pop("kind"))
        record.pop("pid", None)
        if kind not in found or written >= found[kind][0]:
            found[kind] = (written, record)
    return {kind: record for kind, (_, record) in sorted(found.items())}


@contextlib.contextmanager
def collected() -> Iterator[dict[str, dict[str, Any]]]:
    """Stage processes started inside the block report here; the dict is filled on exit.

    The variable is set for the block alone (stages inherit it when they start) and
    the folder is removed after reading.
    """
    folder = Path(tempfile.mkdtemp(prefix="omni-cpu-startup-"))
    previous = envs.OMNI_CPU_STARTUP_DIR
    os.environ[envs.STARTUP_DIR.name] = str(folder)
    stages: dict[str, dict[str, Any]] = {}
    try:
        yield stages
    finally:
        if not previous:
            os.environ.pop(envs.STARTUP_DIR.name, None)
        else:
            os.environ[envs.STARTUP_DIR.name] = previous
        stages.update(read(folder))
        shutil.rmtree(folder, ignore_errors=True)
