"""Shared memory the pipeline creates: recorded while it runs, removed on every exit path.

vLLM and vLLM-Omni put their IPC in /dev/shm, which is RAM: `psm_*` segments
(vLLM's broadcast ring buffers), `sem.mp-*` semaphores, vLLM-Omni's stage
connector segments and their `shm_*_lockfile.lock` files, and Intel OpenMP's
`__KMP_REGISTERED_LIB_<pid>_<uid>` files. Their names say nothing of who made
them, so each run's watchdog writes a ledger: the names its own processes map or
hold open, and their pids. An entry is ours to remove when a ledger of a
finished run lists it (or it is an OpenMP file of one of its pids) and no live
process holds it. A run sweeps the ledgers of runs that are gone before it
starts; `omni-cpu doctor` reports them.

An OpenMP file is stale as soon as the process it names has ended (a zombie
counts as ended: killed stages under `serve`'s subreaper stay zombies for a
moment, which is when the watchdog sweeps). Those of this user whose process is
gone are swept at every start and reported by `doctor` even when no ledger
names them (the ledger that did was removed by a sweep that ran too early).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from omni_cpu.process import procfs, proctree

SHM_DIR = Path("/dev/shm")
LEDGER_PREFIX = "omni-cpu-run-"
LEDGER_SUFFIX = ".json"
_KMP = re.compile(r"^__KMP_REGISTERED_LIB_(?P<pid>\d+)(?:_\d+)?$")
# vLLM-Omni's stage connector: a segment per chunk named f"{request_id}_{stage}_{chunk}"
# (vllm_omni omni_connector_payload_transport.py, 0.30.0) and its lock file
# f"shm_{key}_lockfile.lock" (shm_connector.py). The producer closes the segment before the
# consumer opens it, so nobody may hold it while it waits. A request id carries either a
# uuid4 (the offline API's) or vLLM's `random_uuid()`, 64 random bits as 16 hex digits
# (`speech-<16 hex>` from vLLM-Omni's server), which vLLM's `assign_request_id` may follow with
# `-<8 random characters>`; tests/process/test_shm_names.py makes them with those functions.
_UUID = r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}"
_VLLM_ID = r"[0-9a-f]{16}"
CONNECTOR = re.compile(rf"^(?:shm_)?.*(?:{_UUID}|{_VLLM_ID}).*_\d+_\d+(?:_lockfile\.lock)?$")


@dataclass
class Ledger:
    """What one run (its owner process and watchdog) made in /dev/shm."""

    token: str
    owner_pid: int
    watchdog_pid: int
    pids: set[int] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    mark: str = ""  # the owner's driver mark (envs.DRIVER, omni_cpu.process.guard), if any

    @property
    def path(self) -> Path:
        return SHM_DIR / f"{LEDGER_PREFIX}{self.token}{LEDGER_SUFFIX}"

    def save(self) -> None:
        data = {
            "token": self.token,
            "owner_pid": self.owner_pid,
            "watchdog_pid": self.watchdog_pid,
            "pids": sorted(self.pids),
            "names": sorted(self.names),
            "mark": self.mark,
        }
        temp = self.path.with_suffix(".tmp")
        temp.write_text(json.dumps(data))
        os.replace(temp, self.path)

    @classmethod
    def load(cls, path: Path) -> Ledger | None:
        try:
            data = json.loads(path.read_text())
            return cls(
                str(data["token"]),
                int(data["owner_pid"]),
                int(data["watchdog_pid"]),
                {int(pid) for pid in data["pids"]},
                {str(name) for name in data["names"]},
                str(data.get("mark", "")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self, pids: list[int]) -> bool:
        """Add what `pids` hold now (and their OpenMP files); True when something was new."""
        before = (len(self.pids), len(self.names))
        self.pids.update(pids)
        inodes = procfs.shm_inodes()
        for pid in pids:
            self.names |= procfs.shm_names_held(pid, inodes)
        return before != (len(self.pids), len(self.names))

    def record_new(self, baseline: set[str]) -> None:
        """Add connector and OpenMP entries that appeared since `baseline`, if no other run
        is live.

        Those are held by no process (a connector segment waiting for its reader, the
        OpenMP file of a process that came and went between polls), so only their
        timing ties them to this run; with another omni-cpu run alive it cannot.
        """
        try:
            new = set(os.listdir(SHM_DIR)) - baseline
        except OSError:
            return
        ours = {name for name in new if CONNECTOR.match(name) or _KMP.match(name)}
        if ours and not live_ledgers(self.token):
            self.names |= ours

    def finished(self) -> bool:
        return not (psutil.pid_exists(self.owner_pid) or psutil.pid_exists(self.watchdog_pid))


@dataclass(frozen=True)
class Entry:
    """One /dev/shm entry and the memory it holds (allocated blocks, not its size)."""

    name: str
    bytes_held: int


def _held(path: Path) -> int:
    try:
        return path.stat().st_blocks * 512
    except OSError:
        return 0


def leftovers(ledger: Ledger, in_use: set[str]) -> list[Entry]:
    """Entries of `ledger`'s run still in /dev/shm that no live process holds."""
    found = []
    for name in sorted(ledger.names):
        path = SHM_DIR / name
        kmp = _KMP.match(name)
        if kmp and proctree.is_running(int(kmp["pid"])):
            continue  # an OpenMP file is held by nobody: only a dead pid makes it stale
        if name not in in_use and path.exists():
            found.append(Entry(name, _held(path)))
    for path in SHM_DIR.glob("__KMP_REGISTERED_LIB_*"):
        match = _KMP.match(path.name)
        pid = int(match["pid"]) if match else 0
        if pid in ledger.pids and path.name not in ledger.names and not proctree.is_running(pid):
            found.append(Entry(path.name, _held(path)))
    return found


def orphan_openmp_files() -> list[Entry]:
    """This user's OpenMP files whose process has ended, whichever run (or none) made them."""
    found = []
    uid = os.getuid()
    for path in sorted(SHM_DIR.glob("__KMP_REGISTERED_LIB_*")):
        match = _KMP.match(path.name)
        try:
            mine = path.stat().st_uid == uid
        except OSError:
            continue
        if match and mine and not proctree.is_running(int(match["pid"])):
            found.append(Entry(path.name, _held(path)))
    return found


def remove(entries: list[Entry]) -> int:
    """Unlink `entries`; the bytes that freed."""
    freed = 0
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / entry.name).unlink()
            freed += entry.bytes_held
    return freed


def finished_ledgers() -> list[Ledger]:
    """Ledgers of runs whose owner and watchdog are both gone."""
    found = []
    for path in sorted(SHM_DIR.glob(f"{LEDGER_PREFIX}*{LEDGER_SUFFIX}")):
        ledger = Ledger.load(path)
        if ledger is None:
            continue
        if ledger.finished():
            found.append(ledger)
    return found


def live_ledgers(except_token: str = "") -> list[Ledger]:
    """Ledgers of runs still going, other than `except_token`'s."""
    found = []
    for path in SHM_DIR.glob(f"{LEDGER_PREFIX}*{LEDGER_SUFFIX}"):
        ledger = Ledger.load(path)
        if ledger is not None and ledger.token != except_token and not ledger.finished():
            found.append(ledger)
    return found


def stale() -> list[Entry]:
    """Every entry that finished runs left behind (what `doctor` reports)."""
    in_use = procfs.shm_names_in_use()
    found = {e.name: e for ledger in finished_ledgers() for e in leftovers(ledger, in_use)}
    for entry in orphan_openmp_files():
        found.setdefault(entry.name, entry)
    return sorted(found.values(), key=lambda entry: entry.name)


def sweep(ledger: Ledger) -> int:
    """Remove what `ledger`'s run left (its processes must be gone); the bytes freed."""
    freed = remove(leftovers(ledger, procfs.shm_names_in_use()))
    ledger.path.unlink(missing_ok=True)
    return freed


def sweep_finished() -> int:
    """Remove what every finished run left, their ledgers and stale OpenMP files; bytes freed."""
    return sum(sweep(ledger) for ledger in finished_ledgers()) + remove(orphan_openmp_files())
