"""Container limits from the cgroup file system (v2 and v1), read under a root.

The process's cgroup comes from /proc/self/cgroup (v1's cpuset also from
/proc/self/cpuset); where its controllers are mounted from /proc/self/mountinfo,
else /proc/mounts (any mount point; a `noprefix` cpuset names its files `cpus`,
`mems`), else the usual /sys/fs/cgroup layout. Each controller is read from the
hierarchy that holds it (a hybrid host keeps the cpuset on v1 or the legacy cpuset
file system, cpu and memory on cgroup2); of several mounts of one hierarchy (a
batch scheduler bind-mounts its jobs elsewhere), the one that reaches deepest into
the process's cgroup. Without /proc/self/cgroup, /proc/self/cpuset names the path
on either version. A dump without /proc/self is read from the cgroup tree it
holds: the chain of single child directories below the mount, which is what a
dump of one process's cgroup looks like.

Quotas and memory limits bind at every level of the hierarchy, so the tightest
value from the process's cgroup up to the mount point wins; v2's effective
cpuset lists already fold in their ancestors (v1's own lists, which hwloc reads,
are a subset of their parent's), and where the process's own
directory is absent (a dump that stopped short) its deepest present ancestor
speaks for it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.errors import CpuListError
from omni_cpu.hardware.facts import Limits
from omni_cpu.hardware.sysroot import SysRoot

CGROUP_ROOT = "/sys/fs/cgroup"

# cgroup v1 writes "no limit" as the largest page-aligned counter
# (9223372036854771712 on 4 KiB pages); anything this large is no limit.
_V1_UNLIMITED_BYTES = 1 << 62


@dataclass(frozen=True)
class _Mount:
    mountpoint: str  # where the hierarchy is mounted, on the probed machine
    root: str  # which cgroup of the hierarchy sits at the mount point
    noprefix: bool = False  # v1 cpuset files named `cpus`, not `cpuset.cpus`


_V1_CONTROLLERS = ("cpuset", "cpu", "memory")


def read_limits(sysroot: SysRoot) -> Limits:
    """cgroup limits of the probing process (or of the dump's recorded process).

    Each controller is read from the hierarchy that holds it: on a hybrid machine
    the cpuset may sit on a v1 (or legacy cpuset) mount while cpu and memory sit
    on the unified v2 one.
    """
    cgroup_text = sysroot.read_text("/proc/self/cgroup")
    memberships = _parse_proc_cgroup(cgroup_text)
    cpuset_path = sysroot.read_line("/proc/self/cpuset")
    if not (cpuset_path and cpuset_path.startswith("/")):
        cpuset_path = None
    known = bool(memberships) or cpuset_path is not None
    v1_mounts, v2_mounts = _find_mounts(sysroot)
    v1: dict[str, list[str]] = {}
    for name in _V1_CONTROLLERS:
        mounts = v1_mounts.get(name, [])
        if not mounts:
            continue
        path = memberships.get(name)
        if path is None and name == "cpuset" and not cgroup_text:
            # Kernels before cgroups (and dumps without /proc/self/cgroup) name the
            # cpuset only in /proc/self/cpuset.
            path = cpuset_path
        if path is not None:
            v1[name] = _cgroup_dirs(sysroot, _pick_mount(sysroot, mounts, path), path)
        elif not known:
            v1[name] = _cgroup_dirs(sysroot, mounts[0], _single_chain(sysroot, mounts[0]))
    v2: list[str] | None = None
    if v2_mounts:
        path = memberships.get("")
        if path is None and not cgroup_text and "cpuset" not in v1:
            path = cpuset_path  # without /proc/self/cgroup it names the v2 cgroup too
        if path is None:
            path = "/" if known else _single_chain(sysroot, v2_mounts[0])
        v2 = _cgroup_dirs(sysroot, _pick_mount(sysroot, v2_mounts, path), path)
    if not v1 and v2 is None:
        return Limits()
    noprefix = any(mount.noprefix for mount in v1_mounts.get("cpuset", []))
    cpus, mems = (
        _v1_cpuset(sysroot, v1["cpuset"], noprefix) if "cpuset" in v1 else _v2_cpuset(sysroot, v2)
    )
    quota = _v1_quota(sysroot, v1["cpu"]) if "cpu" in v1 else _v2_quota(sysroot, v2)
    memory = _v1_memory(sysroot, v1["memory"]) if "memory" in v1 else _v2_memory(sysroot, v2)
    return Limits(
        cgroup_version=1 if v1 else 2,
        cpuset_cpus=cpus,
        cpuset_mems=mems,
        cpu_quota_cores=quota,
        memory_max_bytes=memory,
    )


def _single_chain(sysroot: SysRoot, mount: _Mount) -> str:
    """The cgroup a dump without /proc/self holds: single child directories, followed down."""
    path = "/"
    here = mount.mountpoint
    for _ in range(32):  # cgroup trees are shallow; a loop guard, not a limit anyone meets
        children = [name for name in sysroot.listdir(here) if sysroot.is_dir(f"{here}/{name}")]
        if len(children) != 1:
            break
        here = f"{here}/{children[0]}"
        path = posixpath.join(path, children[0])
    return posixpath.join(mount.root, path.lstrip("/")) if mount.root != "/" else path


# -- v2 --------------------------------------------------------------------------


def _v2_cpuset(sysroot: SysRoot, dirs: list[str] | None) -> tuple[str | None, str | None]:
    """(cpus, mems): the effective lists fold in every ancestor; where a level lacks
    them (cpuset not enabled below it), the nearest level that has them speaks."""
    if not dirs:
        return None, None
    cpus = _first_cpu_list(sysroot, [f"{d}/cpuset.cpus.effective" for d in dirs])
    if cpus is None:
        cpus = _intersection(sysroot, [f"{d}/cpuset.cpus" for d in dirs])
    mems = _first_cpu_list(sysroot, [f"{d}/cpuset.mems.effective" for d in dirs])
    if mems is None:
        mems = _intersection(sysroot, [f"{d}/cpuset.mems" for d in dirs])
    return cpus, mems


def _v2_quota(sysroot: SysRoot, dirs: list[str] | None) -> float | None:
    return _tightest([_parse_cpu_max(sysroot.read_line(f"{d}/cpu.max")) for d in dirs or []])


def _v2_memory(sysroot: SysRoot, dirs: list[str] | None) -> int | None:
    return _tightest([_parse_v2_bytes(sysroot.read_line(f"{d}/memory.max")) for d in dirs or []])


def _parse_cpu_max(line: str | None) -> float | None:
    """`150000 100000` → 1.5 cores; `max 100000` → None (no quota)."""
    if not line:
        return None
    fields = line.split()
    try:
        if fields[0] == "max":
            return None
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) > 1 else 100_000
    except (ValueError, IndexError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _parse_v2_bytes(line: str | None) -> int | None:
    if not line or line == "max":
        return None
    try:
        value = int(line)
    except ValueError:
        return None
    return value if value >= 0 else None


# -- v1 --------------------------------------------------------------------------


def _v1_cpuset(sysroot: SysRoot, dirs: list[str], noprefix: bool) -> tuple[str | None, str | None]:
    # v1's own lists bind (a child's are a subset of its parent's), as hwloc reads them:
    # the effective_* files can be narrower (cpuset_v2_mode, CPUs that went offline and
    # back) and offline CPUs are dropped anyway; they speak only where the own lists are
    # absent. Mounted with `noprefix` (or as the legacy `cpuset` file system) the files
    # drop their `cpuset.` prefix; try the mount's own spelling first, then the other.
    prefixes = ("", "cpuset.") if noprefix else ("cpuset.", "")

    def files(kind: str) -> list[str]:
        return [
            f"{d}/{prefix}{name}"
            for d in dirs
            for name in (kind, f"effective_{kind}")
            for prefix in prefixes
        ]

    return _first_cpu_list(sysroot, files("cpus")), _first_cpu_list(sysroot, files("mems"))


def _v1_quota(sysroot: SysRoot, dirs: list[str]) -> float | None:
    return _tightest(
        [
            _parse_cfs_quota(
                sysroot.read_int(f"{d}/cpu.cfs_quota_us"),
                sysroot.read_int(f"{d}/cpu.cfs_period_us"),
            )
            for d in dirs
        ]
    )


def _v1_memory(sysroot: SysRoot, dirs: list[str]) -> int | None:
    return _tightest(
        [_parse_v1_bytes(sysroot.read_int(f"{d}/memory.limit_in_bytes")) for d in dirs]
    )


def _parse_cfs_quota(quota: int | None, period: int | None) -> float | None:
    """cfs_quota_us / cfs_period_us as cores; -1 (or missing) is no quota."""
    if quota is None or quota <= 0:
        return None
    return quota / (period if period and period > 0 else 100_000)


def _parse_v1_bytes(value: int | None) -> int | None:
    if value is None or value < 0 or value >= _V1_UNLIMITED_BYTES:
        return None
    return value


# -- finding the process's cgroup directories -----------------------------------


def _parse_proc_cgroup(text: str | None) -> dict[str, str]:
    """Controller → cgroup path; the v2 (unified) entry is under "" ."""
    memberships: dict[str, str] = {}
    for line in (text or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            memberships.setdefault("", path or "/")
            continue
        for controller in controllers.split(","):
            # "cpu,cpuacct" lists both; "name=systemd" names no controller.
            if controller and "=" not in controller:
                memberships.setdefault(controller, path or "/")
    return memberships


def _find_mounts(sysroot: SysRoot) -> tuple[dict[str, list[_Mount]], list[_Mount]]:
    """(v1 controller → mounts, v2 mounts) from mountinfo, /proc/mounts, or the usual layout.

    A hierarchy may be mounted more than once (a batch scheduler or container
    runtime bind-mounts a job's subtree elsewhere); every mount is kept, in order,
    and the one that holds the process's cgroup is picked later.
    """
    v1: dict[str, list[_Mount]] = {}
    v2: list[_Mount] = []

    def add(fstype: str, mountpoint: str, root: str, options: list[str]) -> None:
        if fstype == "cgroup2":
            v2.append(_Mount(mountpoint, root))
        elif fstype == "cgroup":
            for option in options:
                v1.setdefault(option, []).append(_Mount(mountpoint, root, "noprefix" in options))
        elif fstype == "cpuset":  # the legacy cpuset file system: always without prefix
            v1.setdefault("cpuset", []).append(_Mount(mountpoint, root, True))

    for line in (sysroot.read_text("/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 5 or len(fields) < sep + 3:
            continue
        options = fields[sep + 3].split(",") + fields[5].split(",")
        add(fields[sep + 1], _unescape(fields[4]), _unescape(fields[3]), options)
    if v1 or v2:
        return v1, v2
    # /proc/mounts (or /proc/self/mounts) has no cgroup root column: the mount shows
    # the hierarchy's root as far as this namespace can tell.
    mounts = sysroot.read_text("/proc/self/mounts") or sysroot.read_text("/proc/mounts") or ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            add(fields[2], _unescape(fields[1]), "/", fields[3].split(","))
    if v1 or v2:
        return v1, v2
    # Dumps and synthetic roots: /sys/fs/cgroup is v2 when it has cgroup.controllers,
    # else v1 with one directory per controller group ("cpu,cpuacct").
    if sysroot.exists(f"{CGROUP_ROOT}/cgroup.controllers"):
        return {}, [_Mount(CGROUP_ROOT, "/")]
    for name in sysroot.listdir(CGROUP_ROOT):
        directory = f"{CGROUP_ROOT}/{name}"
        if sysroot.is_dir(directory):
            for controller in name.split(","):
                v1.setdefault(controller, []).append(_Mount(directory, "/"))
    unified = f"{CGROUP_ROOT}/unified"
    if sysroot.exists(f"{unified}/cgroup.controllers"):
        v2.append(_Mount(unified, "/"))
    return v1, v2


def _pick_mount(sysroot: SysRoot, mounts: list[_Mount], path: str) -> _Mount:
    """The mount that reaches deepest into the process's cgroup (the first on a tie)."""

    def reach(mount: _Mount) -> tuple[bool, int]:
        inside = mount.root == "/" or path == mount.root or path.startswith(mount.root + "/")
        leaf = _cgroup_dirs(sysroot, mount, path)[0]
        depth = leaf.count("/") - mount.mountpoint.rstrip("/").count("/")
        present = sysroot.is_dir(leaf)
        return (inside and present, depth + (mount.root.count("/") if mount.root != "/" else 0))

    return max(mounts, key=reach)


def _cgroup_dirs(sysroot: SysRoot, mount: _Mount, path: str) -> list[str]:
    """The process's cgroup directory and its ancestors up to the mount point."""
    relative = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        relative = path[len(mount.root) :] or "/"
    leaf = posixpath.normpath(posixpath.join(mount.mountpoint, relative.lstrip("/")))
    if not leaf.startswith(mount.mountpoint):
        leaf = mount.mountpoint
    # A path from another cgroup namespace, or a dump that stopped short of the
    # process's own directory: its deepest present ancestor is what binds it.
    while leaf != mount.mountpoint and leaf != "/" and not sysroot.is_dir(leaf):
        leaf = posixpath.dirname(leaf)
    dirs = [leaf]
    while dirs[-1] != mount.mountpoint and dirs[-1] != "/":
        dirs.append(posixpath.dirname(dirs[-1]))
    return dirs


def _first_cpu_list(sysroot: SysRoot, files: list[str]) -> str | None:
    for name in files:
        line = sysroot.read_line(name)
        if not line:
            continue
        try:
            return format_cpu_list(parse_cpu_list(line))
        except CpuListError:
            continue
    return None


def _intersection(sysroot: SysRoot, files: list[str]) -> str | None:
    """Configured (not effective) lists bind at every level: what all of them allow."""
    allowed: set[int] | None = None
    for name in files:
        line = sysroot.read_line(name)
        if not line:
            continue
        try:
            cpus = set(parse_cpu_list(line))
        except CpuListError:
            continue
        allowed = cpus if allowed is None else allowed & cpus
    return None if allowed is None else format_cpu_list(allowed)


def _tightest(values: list[float | None] | list[int | None]) -> float | int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return (
        text.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )
