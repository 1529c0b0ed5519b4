"""Memory of every process of one `omni-cpu` command, measured honestly.

Runs the command given after `--` (e.g. `omni-cpu run ...`) and samples its process
tree every --interval seconds until it exits. For each process it keeps:

* VmHWM (the kernel's resident high-water mark), and the peaks of VmRSS split into
  anonymous, file-backed and shared-memory pages (/proc/PID/status);
* the peak PSS (/proc/PID/smaps_rollup): pages shared by N processes count 1/N in
  each, so torch's and vLLM's libraries, mapped by every process, are counted once
  in the sum instead of 3-5 times (VmHWM summed over processes counts them in each);
* at its largest RSS, the mappings holding the most (/proc/PID/smaps, by file or
  [anon]): where the peak beyond the weights goes.

The sum of peak PSS over processes is an upper bound of what the command needed
at once; the peak of the per-sample PSS total is the closest to it (sampling can
miss a short peak by up to one interval).

    .venv/bin/python benchmarks/memory_per_process.py --json out.json -- \\
        .venv/bin/omni-cpu run --model /work/ckpt/0.6b --text "Hello there." \\
        --max-frames 24 --out /tmp/x.wav
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

GIB = 1 << 30
MIB = 1 << 20


def _kib_fields(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in keys:
            out[name] = int(rest.split()[0]) * 1024
    return out


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


STATUS_KEYS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")
ROLLUP_KEYS = ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = _read(f"{task}/children") or ""
        found += [int(word) for word in text.split()]
    return found


def tree(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += children(pid)
    return pids


def role(pid: int) -> str:
    """A name for the process: vLLM's title, or the Python module / script it runs."""
    raw = _read(f"/proc/{pid}/cmdline") or ""
    words = [w for w in raw.split("\0") if w]
    if not words:
        return "?"
    if len(words) == 1:  # a process that set its title (VLLM::...)
        return words[0][:60]
    if "-m" in words:
        return "python -m " + words[words.index("-m") + 1]
    if "-c" in words:
        return "python -c " + words[words.index("-c") + 1][:40]
    return " ".join(Path(w).name for w in words[:2])[:60]


def top_mappings(pid: int, count: int) -> list[tuple[str, int]]:
    """The `count` mappings (by file, or [anon]/[heap]) with the most resident bytes."""
    text = _read(f"/proc/{pid}/smaps")
    if text is None:
        return []
    sizes: dict[str, int] = {}
    name = "[anon]"
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping line
            name = head[5].strip() if len(head) == 6 else "[anon]"
        elif line.startswith("Rss:"):
            sizes[name] = sizes.get(name, 0) + int(line.split()[1]) * 1024
    return sorted(sizes.items(), key=lambda item: -item[1])[:count]


@dataclass
class ProcessPeak:
    pid: int
    role: str
    stage_bind: str | None
    peak: dict[str, int] = field(default_factory=dict)
    top_at_peak_rss: list[tuple[str, int]] = field(default_factory=list)
    first_s: float = 0.0
    last_s: float = 0.0


def sample(root: int, peaks: dict[int, ProcessPeak], start: float, top: int) -> int:
    """One pass over the tree; the PSS total of this moment."""
    total = 0
    now = time.monotonic() - start
    for pid in tree(root):
        status = _read(f"/proc/{pid}/status")
        rollup = _read(f"/proc/{pid}/smaps_rollup")
        if status is None or rollup is None:
            continue
        values = {**_kib_fields(status, STATUS_KEYS), **_kib_fields(rollup, ROLLUP_KEYS)}
        total += values.get("Pss", 0)
        known = peaks.get(pid)
        if known is None or known.role in ("?",) or known.role.startswith("python"):
            environ = (_read(f"/proc/{pid}/environ") or "").split("\0")
            bind = next(
                (e.split("=", 1)[1] for e in environ if e.startswith("VLLM_CPU_OMP_THREADS_BIND=")),
                None,
            )
            old = known
            known = peaks[pid] = ProcessPeak(pid, role(pid), bind, first_s=now)
            if old is not None:
                known.peak, known.top_at_peak_rss, known.first_s = (
                    old.peak,
                    old.top_at_peak_rss,
                    old.first_s,
                )
        known.last_s = now
        grew = values.get("VmRSS", 0) > known.peak.get("VmRSS", 0) * 1.05 + 16 * MIB
        for key, value in values.items():
            known.peak[key] = max(known.peak.get(key, 0), value)
        if grew and top:
            known.top_at_peak_rss = top_mappings(pid, top)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--top", type=int, default=6, help="mappings shown per process")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    start = time.monotonic()
    child = subprocess.Popen(command)
    peaks: dict[int, ProcessPeak] = {}
    peak_total = 0
    while child.poll() is None:
        peak_total = max(peak_total, sample(child.pid, peaks, start, args.top))
        time.sleep(args.interval)
    wall = time.monotonic() - start
    rows = sorted(peaks.values(), key=lambda p: -p.peak.get("VmHWM", 0))
    print(f"\n{'pid':>7} {'VmHWM':>9} {'PSS':>9} {'anon':>9} {'file':>9} {'shmem':>9}  process")
    for p in rows:
        g = {k: p.peak.get(k, 0) / GIB for k in ("VmHWM", "Pss", "RssAnon", "RssFile", "RssShmem")}
        print(
            f"{p.pid:>7} {g['VmHWM']:8.2f}G {g['Pss']:8.2f}G {g['RssAnon']:8.2f}G "
            f"{g['RssFile']:8.2f}G {g['RssShmem']:8.2f}G  {p.role} [{p.stage_bind or '-'}]"
        )
        for name, size in p.top_at_peak_rss:
            print(f"{'':>49}{size / GIB:6.2f}G {name[-70:]}")
    sum_hwm = sum(p.peak.get("VmHWM", 0) for p in rows)
    sum_pss = sum(p.peak.get("Pss", 0) for p in rows)
    print(
        f"sum of VmHWM {sum_hwm / GIB:.2f} GiB · sum of peak PSS {sum_pss / GIB:.2f} GiB · "
        f"peak PSS total at one moment {peak_total / GIB:.2f} GiB · wall {wall:.1f} s · "
        f"exit {child.returncode}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "processes": [asdict(p) for p in rows],
                    "sum_vmhwm_bytes": sum_hwm,
                    "sum_peak_pss_bytes": sum_pss,
                    "peak_pss_total_bytes": peak_total,
                    "wall_s": wall,
                    "returncode": child.returncode,
                },
                indent=2,
            )
        )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
