"""Packed weights kept on disk, so a second start maps them instead of packing them again.

Why: an int8, int4 or bf16 talker stage quantizes and packs every linear layer of the talker
and its code predictor at each start, seconds that depend only on the checkpoint, the format
and the code that packs (benchmarks/RESULTS.md, "Packed-weight cache: a hit against a miss").
So the result is written once and mapped afterwards.

Where: one safetensors file per entry in `OMNI_CPU_WEIGHT_CACHE` (default `packed/` beside
the kernel builds; `off` turns the cache off), named `<slot>-<key>.safetensors`; its JSON
header says what the entry is for (`describe` reads it without torch).

The key: an entry is used only when all of these are what they were when it was written.
- Each checkpoint file's resolved path, device, inode, size, mtime_ns and ctime_ns, and the
  sha256 of its header. Hashing the data would cost a read of the whole checkpoint, about
  what packing costs; a rewrite in place moves mtime and ctime, a replace by rename makes a
  new inode, and a writer that puts the old mtime back (`cp -p`, `rsync -a`) still moves
  ctime. A false miss costs one repack, a false hit wrong audio: the key errs on missing.
- The kernel build (`gemv.build_name()`), the Python that quantizes and packs (this file,
  gemv.py, packing.py and the caller's files, hashed), LAYOUT_VERSION, the group sizes, the
  torch version and the caller's parts (format, dtype, vLLM versions, ...).
- The NUMA nodes of this process's CPUs: a mapped file's pages live on the node that first
  read them, so replicas on two sockets each get their own entry.
The slot is the key without the checkpoint's fingerprint, the code and the library versions:
a new entry in a slot replaces the old one, so an upgrade leaves nothing stale behind.

Loading: `safe_open` maps the file privately and read-only; each tensor is a view of the
mapping, its pages shared by every process that maps the file. Writing: at the end of a load
that packed anything, a temp file in the same folder, fsync, `os.replace` (two writers: the
last rename wins with the same bytes). A truncated, foreign or mismatched file is ignored and
the load's own packing replaces it. Every tensor is aligned to 64 bytes (the GEMV's loads).

Bounds: at most MAX_BYTES in all; after a write, other entries of the same slot go, then
entries whose checkpoint no longer exists, then the least recently used; nothing is written
that would leave less than MIN_FREE_BYTES free. Temp files of a dead writer go after an hour.

`python -m omni_cpu.kernels.weight_cache` shows the entries (JSON); `--clear` removes them.
Not cached: FBGEMM's int8 and vLLM's oneDNN handles. Written against safetensors 0.8
(`safe_open(..., "pt")` maps the file) and torch 2.13.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni_cpu import envs
from omni_cpu.checkpoint.safetensors_file import MAX_HEADER_BYTES, read_header
from omni_cpu.hardware.numa import node_of_cpus, read_numa_nodes
from omni_cpu.hardware.sysroot import SysRoot
from omni_cpu.kernels import build, gemv, packing

LAYOUT_VERSION = "1"  # bump when the stored tensors of a packed class change meaning
FORMAT_MARK = "omni_cpu_packed_weights"  # the metadata field that says a file is ours
MAX_BYTES = 8 << 30  # 0.6B in bf16, int8 and int4 is ~1.8 GB; the 1.7B's three ~5 GB
MIN_FREE_BYTES = 1 << 30
ALIGN = 64  # bytes: a cache line; every stored tensor size here is a multiple already
STALE_TEMP_S = 3600.0
SEPARATOR = "|"  # between a layer's name and its tensor's name

DTYPE_CODES = {
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.int32: "I32",
    torch.int8: "I8",
    torch.uint8: "U8",
}


def cache_root() -> Path | None:
    """Where entries live (`OMNI_CPU_WEIGHT_CACHE`; default beside the kernel builds), or None."""
    chosen = envs.OMNI_CPU_WEIGHT_CACHE
    if chosen == "off":
        return None
    return Path(chosen) if chosen else build.cache_root() / "packed"


def file_fingerprint(path: Path) -> dict[str, Any]:
    """What says a safetensors file is the one an entry was packed from (see the module doc)."""
    resolved = path.resolve()
    with resolved.open("rb") as handle:
        stat = os.fstat(handle.fileno())
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        header = handle.read(min(length, MAX_HEADER_BYTES))
    return {
        "path": str(resolved),
        "device": stat.st_dev,
        "inode": stat.st_ino,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "header_sha256": hashlib.sha256(head + header).hexdigest(),
    }


def numa_nodes(sysroot: SysRoot | None = None) -> str:
    """The NUMA nodes of the CPUs this process may run on ("0", "0,1"; "" where sysfs says none),
    as the probe reads them (omni_cpu.hardware.numa)."""
    allowed = os.sched_getaffinity(0)
    nodes, stated = read_numa_nodes(sysroot or SysRoot(), allowed, None, None)
    if not stated:
        return ""
    owner = node_of_cpus(nodes)
    return ",".join(str(node) for node in sorted({owner[cpu] for cpu in allowed if cpu in owner}))


def _sha256_of_files(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class EntryKey:
    """Which entry a load may use: its slot, its full key, and what both were made of."""

    slot: str
    key: str
    described: dict[str, Any]

    @property
    def file_name(self) -> str:
        return f"{self.slot}-{self.key}.safetensors"


def entry_key(
    checkpoint_files: Sequence[Path],
    *,
    build: str,
    parts: Mapping[str, str],
    versions: Mapping[str, str] | None = None,
    code_files: Sequence[Path] = (),
) -> EntryKey:
    """The key of the packed weights of `checkpoint_files` under `build` and `parts`.

    `parts` name the slot with the build (weight format, dtype); `versions` (libraries,
    configs) and `code_files` (the caller's Python that decides which layer gets which
    packing) only the key, so an upgrade replaces the slot's entry.
    """
    slot_parts = {
        "layout": LAYOUT_VERSION,
        "groups": (f"block={packing.BLOCK},int4={packing.INT4_GROUP},refits={packing.INT4_REFITS}"),
        "kernel_build": build,
        "torch": torch.__version__,
        "numa_nodes": numa_nodes(),
        "checkpoint_folders": sorted({str(p.resolve().parent) for p in checkpoint_files}),
        **dict(parts),
    }
    code = [Path(gemv.__file__), Path(packing.__file__), Path(__file__), *code_files]
    keyed = {
        **slot_parts,
        **dict(versions or {}),
        "code_sha256": _sha256_of_files(code),
        "checkpoint": [file_fingerprint(path) for path in sorted(checkpoint_files)],
    }

    def digest(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    return EntryKey(digest(slot_parts), digest(keyed), keyed)


@dataclass
class _Layer:
    kernel: str
    shape: tuple[int, int]  # the float weight's [N, K]
    tensors: dict[str, torch.Tensor]


@dataclass
class WeightCache:
    """One load's entry: tensors found in it, tensors packed for it, written at `commit`."""

    root: Path
    entry: EntryKey
    status: str = "miss"  # hit (an entry was found), miss (none), corrupt (one was ignored)
    note: str = ""  # why an entry was ignored or not written, for the stage's log
    _stored: dict[str, _Layer] = field(default_factory=dict)  # what the file holds
    _used: dict[str, _Layer] = field(default_factory=dict)  # what this load holds
    _dirty: bool = False

    @property
    def path(self) -> Path:
        return self.root / self.entry.file_name

    @classmethod
    def open(cls, root: Path, entry: EntryKey) -> WeightCache:
        """The entry for `entry` in `root`: a hit maps its file; a missing or bad file is a miss."""
        from safetensors import SafetensorError

        cache = cls(root, entry)
        try:
            cache._stored = _read_entry(cache.path, entry.key)
        except FileNotFoundError:
            return cache
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as error:
            cache.status, cache.note = "corrupt", f"ignored {cache.path.name}: {error}"
            return cache
        cache.status = "hit"
        with contextlib.suppress(OSError):
            os.utime(cache.path)  # recently used: eviction goes oldest first
        return cache

    def get(self, name: str, kernel: str, shape: tuple[int, int]) -> dict[str, torch.Tensor] | None:
        """The stored tensors of layer `name` packed for `kernel` from an [N, K] `shape` weight."""
        layer = self._stored.get(name)
        if layer is None or layer.kernel != kernel or layer.shape != tuple(shape):
            return None
        self._used[name] = layer
        return dict(layer.tensors)

    def holds(
        self,
        name: str,
        kernel: str,
        shape: tuple[int, int],
        expected: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
    ) -> bool:
        """Whether `get` will give layer `name` as `expected` tensors (name -> shape, dtype)."""
        layer = self._stored.get(name)
        if layer is None or layer.kernel != kernel or layer.shape != tuple(shape):
            return False
        found = {part: (tuple(t.shape), t.dtype) for part, t in layer.tensors.items()}
        return found == dict(expected)

    def put(
        self, name: str, kernel: str, shape: tuple[int, int], tensors: dict[str, torch.Tensor]
    ) -> None:
        """Layer `name`'s freshly packed tensors, to be written at `commit`."""
        self._used[name] = _Layer(kernel, (int(shape[0]), int(shape[1])), dict(tensors))
        self._dirty = True

    def commit(self) -> Path | None:
        """Write this load's layers when any was packed here; the file, or None (nothing new)."""
        if not self._dirty:
            return None
        tensors = {
            f"{name}{SEPARATOR}{part}": tensor
            for name, layer in self._used.items()
            for part, tensor in layer.tensors.items()
        }
        layers = {name: [layer.kernel, *layer.shape] for name, layer in self._used.items()}
        metadata = {
            FORMAT_MARK: LAYOUT_VERSION,
            "key": self.entry.key,
            "entry": json.dumps(self.entry.described, sort_keys=True),
            "layers": json.dumps(layers),
        }
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if size > MAX_BYTES:
                self.note = (
                    f"not written: {size >> 20} MiB is over the cache's {MAX_BYTES >> 30} GiB"
                )
                return None
            if shutil.disk_usage(self.root).free - size < MIN_FREE_BYTES:
                self.note = f"not written: {self.root} would keep under 1 GiB free"
                return None
            _write_atomically(self.path, tensors, metadata)
        except OSError as error:
            self.note = f"not written: {error}"
            return None
        self._dirty = False
        evict(self.root, keep=self.path, slot=self.entry.slot)
        return self.path


def _read_entry(path: Path, key: str) -> dict[str, _Layer]:
    """The layers of the entry file at `path`, each tensor a view of its mapping."""
    from safetensors import safe_open

    metadata = read_header(path).get("__metadata__") or {}
    if metadata.get(FORMAT_MARK) != LAYOUT_VERSION or metadata.get("key") != key:
        raise ValueError("another layout or key")
    shapes = json.loads(metadata["layers"])
    layers = {name: _Layer(kernel, (n, k), {}) for name, (kernel, n, k) in shapes.items()}
    with safe_open(str(path), framework="pt") as handle:
        for stored in handle.keys():  # noqa: SIM118 - safe_open has no iterator
            name, _, part = stored.rpartition(SEPARATOR)
            if name in layers:
                layers[name].tensors[part] = handle.get_tensor(stored)
    return layers


def _write_atomically(
    path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
) -> None:
    """safetensors at `path`, each tensor at a 64-byte offset, via a temp file and a rename."""
    header: dict[str, Any] = {"__metadata__": metadata}
    chunks: list[torch.Tensor | bytes] = []
    offset = 0
    for name, tensor in tensors.items():
        pad = -offset % ALIGN
        if pad:  # safetensors allows no holes: padding is a tensor of its own
            header[f"__pad{len(chunks)}"] = {
                "dtype": "U8",
                "shape": [pad],
                "data_offsets": [offset, offset + pad],
            }
            chunks.append(bytes(pad))
            offset += pad
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": DTYPE_CODES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        chunks.append(tensor)
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)  # the data starts on a 64-byte boundary
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temp.open("wb") as out:
            out.write(struct.pack("<Q", len(text)) + text)
            for chunk in chunks:
                if isinstance(chunk, bytes):
                    out.write(chunk)
                else:
                    out.write(chunk.contiguous().reshape(-1).view(torch.uint8).numpy().data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every entry file in `root`, oldest first."""
    found = []
    for path in root.glob("*.safetensors"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append((stat.st_mtime, stat.st_size, path))
    return sorted(found)


def _checkpoint_gone(path: Path) -> bool:
    """Whether a file the entry at `path` was packed from no longer exists (False if unknown)."""
    try:
        metadata = read_header(path).get("__metadata__") or {}
        described = json.loads(metadata.get("entry", "{}"))
        files = [Path(item["path"]) for item in described.get("checkpoint", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    return any(not file.exists() for file in files)


def evict(root: Path, *, keep: Path, slot: str, max_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove `slot`'s other entries and those of gone checkpoints, then the oldest past the cap."""
    removed = []
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        superseded = path.name.startswith(f"{slot}-") or _checkpoint_gone(path)
        if path != keep and (superseded or total > max_bytes):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
                total -= size
    now = time.time()
    for temp in root.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if now - temp.stat().st_mtime > STALE_TEMP_S:
                temp.unlink()
    return removed


def describe(root: Path | None) -> dict[str, Any]:
    """The cache's folder, entries and bytes, read from the headers alone (no torch needed)."""
    if root is None:
        return {"folder": None, "entries": [], "bytes": 0}
    entries = []
    for mtime, size, path in _entries(root) if root.is_dir() else []:
        try:
            metadata = read_header(path).get("__metadata__") or {}
            described = json.loads(metadata.get("entry", "{}"))
        except (OSError, ValueError):
            described = {}
        entries.append(
            {
                "file": path.name,
                "bytes": size,
                "last_used": mtime,
                "weights": described.get("weights"),
                "checkpoint": described.get("checkpoint_folders"),
            }
        )
    return {"folder": str(root), "entries": entries, "bytes": sum(e["bytes"] for e in entries)}


def clear(root: Path | None) -> int:
    """Remove every entry and temp file in `root`; how many files went."""
    if root is None or not root.is_dir():
        return 0
    removed = 0
    for path in [*root.glob("*.safetensors"), *root.glob(".*.tmp")]:
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m omni_cpu.kernels.weight_cache [--clear]`: show the cache (JSON), or empty it."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--clear"]):
        print("usage: python -m omni_cpu.kernels.weight_cache [--clear]", file=sys.stderr)
        return 2
    root = cache_root()
    if args == ["--clear"]:
        print(f"weight cache: removed {clear(root)} file(s) from {root}")
        return 0
    print(json.dumps(describe(root), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
