"""The packed-weight cache: a hit multiplies exactly as a fresh pack, and stale entries miss.

A "checkpoint" here is a real safetensors file written by the safetensors library; the
cache entries are real files in a temp folder, read back through `safe_open`'s mapping.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("safetensors", reason="the inference runtime is not installed")

import torch
from safetensors.torch import save_file

from omni_cpu.kernels import build, gemv, packing, weight_cache
from omni_cpu.kernels.weight_cache import WeightCache, entry_key
from tests.helpers.tensors import weight

pytestmark = [pytest.mark.cpu]
MODULE = gemv.kernel() or gemv.avx2_kernel()
needs_gemv = pytest.mark.skipif(MODULE is None, reason="no omni-cpu GEMV on this CPU")
PACKERS = {
    "bf16": (gemv.PackedBf16Weights, torch.bfloat16),
    "int8": (gemv.PackedInt8Weights, torch.float32),
    "int4": (gemv.PackedInt4Weights, torch.float32),
}
BUILD = "torch-test-000000000000"


def checkpoint(folder: Path, seed: int = 0) -> Path:
    """A one-tensor safetensors checkpoint, as the safetensors library writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.safetensors"
    save_file({"talker.w": weight(64, 64, seed).to(torch.bfloat16)}, str(path))
    return path


def key(files: list[Path], build: str = BUILD, weights: str = "int8") -> weight_cache.EntryKey:
    return entry_key(files, build=build, parts={"weights": weights})


def mapped_files() -> dict[str, list[tuple[int, int]]]:
    """Address ranges of every file mapped in this process."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6:
            start, _, end = fields[0].partition("-")
            ranges.setdefault(fields[5], []).append((int(start, 16), int(end, 16)))
    return ranges


@needs_gemv
@pytest.mark.parametrize("fmt", sorted(PACKERS))
@pytest.mark.parametrize(
    "shape", [(48, 64), (208, 192), (6144, 1024)], ids=lambda s: f"{s[0]}x{s[1]}"
)
def test_a_hit_multiplies_bit_for_bit_as_a_fresh_pack(
    tmp_path: Path, fmt: str, shape: tuple[int, int]
) -> None:
    # 48 x 64 and 208 x 192 end in a partial column block; 6144 x 1024 is the 0.6B's gate_up.
    packer, dtype = PACKERS[fmt]
    if fmt == "int4" and shape[1] % packing.INT4_GROUP:
        pytest.skip("int4 takes K in whole groups")
    w = weight(*shape).to(dtype)
    entry = key([checkpoint(tmp_path / "ckpt")], weights=fmt)
    fresh = packer(w, MODULE)
    writer = WeightCache.open(tmp_path / "cache", entry)
    writer.put("layer", fmt, shape, fresh.tensors())
    assert writer.commit() is not None

    reader = WeightCache.open(tmp_path / "cache", entry)
    assert reader.status == "hit"
    cached = packer.from_tensors(reader.get("layer", fmt, shape), MODULE, *shape)
    for name, tensor in fresh.tensors().items():
        assert torch.equal(cached.tensors()[name], tensor), name
    x = torch.randn(3, shape[1]).to(dtype)
    assert torch.equal(cached(x), fresh(x))


@needs_gemv
def test_a_hit_maps_the_file_instead_of_copying_it(tmp_path: Path) -> None:
    entry = key([checkpoint(tmp_path / "ckpt")])
    fresh = gemv.PackedInt8Weights(weight(256, 256), MODULE)
    writer = WeightCache.open(tmp_path / "cache", entry)
    writer.put("layer", "int8", (256, 256), fresh.tensors())
    path = writer.commit()
    packed = WeightCache.open(tmp_path / "cache", entry).get("layer", "int8", (256, 256))
    ranges = mapped_files()[str(path)]
    for tensor in packed.values():
        address = tensor.data_ptr()
        assert any(low <= address < high for low, high in ranges)
        assert address % weight_cache.ALIGN == 0


def _written_entry(tmp_path: Path, files: list[Path]) -> WeightCache:
    cache = WeightCache.open(tmp_path / "cache", key(files))
    cache.put("layer", "int8", (16, 16), {"packed": torch.ones(16, 16, dtype=torch.int8)})
    cache.commit()
    return cache


def test_an_untouched_checkpoint_is_a_hit(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    _written_entry(tmp_path, files)
    assert WeightCache.open(tmp_path / "cache", key(files)).status == "hit"


def test_a_checkpoint_rewritten_in_place_is_a_miss(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    before = os.stat(files[0])
    _written_entry(tmp_path, files)
    time.sleep(0.02)  # past a coarse file-system clock tick, as any real rewrite is
    with files[0].open("r+b") as handle:  # same header, same size, new values
        handle.seek(-64, os.SEEK_END)
        handle.write(bytes(range(64)))
    after = os.stat(files[0])
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert WeightCache.open(tmp_path / "cache", key(files)).status == "miss"


def test_a_rewrite_that_puts_the_old_mtime_back_is_a_miss(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    before = os.stat(files[0])
    _written_entry(tmp_path, files)
    time.sleep(0.02)
    with files[0].open("r+b") as handle:
        handle.seek(-64, os.SEEK_END)
        handle.write(bytes(range(64)))
    os.utime(files[0], ns=(before.st_atime_ns, before.st_mtime_ns))  # as cp -p / rsync -a do
    assert WeightCache.open(tmp_path / "cache", key(files)).status == "miss"


def test_a_checkpoint_replaced_by_another_file_is_a_miss(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    _written_entry(tmp_path, files)
    replacement = checkpoint(tmp_path / "other", seed=1)
    os.replace(replacement, files[0])
    assert WeightCache.open(tmp_path / "cache", key(files)).status == "miss"


def test_another_kernel_build_is_a_miss(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    _written_entry(tmp_path, files)
    assert WeightCache.open(tmp_path / "cache", key(files, build="torch-x-111")).status == "miss"


def test_another_weight_format_is_another_entry(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    _written_entry(tmp_path, files)
    assert WeightCache.open(tmp_path / "cache", key(files, weights="int4")).status == "miss"


def test_a_layer_of_another_shape_is_not_taken(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    _written_entry(tmp_path, files)
    cache = WeightCache.open(tmp_path / "cache", key(files))
    assert cache.get("layer", "int8", (16, 32)) is None
    assert cache.get("layer", "int4", (16, 16)) is None
    assert cache.get("layer", "int8", (16, 16)) is not None


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_entry_is_ignored_and_rewritten(tmp_path: Path, damage: str) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    path = _written_entry(tmp_path, files).path
    size = path.stat().st_size
    if damage == "truncated":
        os.truncate(path, size - 100)
    elif damage == "garbage":
        path.write_bytes(b"not a safetensors file" * 10)
    else:
        path.write_bytes(b"")
    cache = WeightCache.open(tmp_path / "cache", key(files))
    assert cache.status == "corrupt"
    assert cache.get("layer", "int8", (16, 16)) is None
    cache.put("layer", "int8", (16, 16), {"packed": torch.ones(16, 16, dtype=torch.int8)})
    assert cache.commit() == path
    reread = WeightCache.open(tmp_path / "cache", key(files))
    assert reread.status == "hit"
    assert torch.equal(reread.get("layer", "int8", (16, 16))["packed"], torch.ones(16, 16))


def test_two_writers_at_once_leave_one_whole_entry(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    caches = [WeightCache.open(tmp_path / "cache", key(files)) for _ in range(2)]
    for cache in caches:
        cache.put("layer", "int8", (512, 512), {"packed": torch.ones(512, 512, dtype=torch.int8)})
    threads = [threading.Thread(target=cache.commit) for cache in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [caches[0].path.name]
    assert WeightCache.open(tmp_path / "cache", key(files)).status == "hit"


def test_a_new_entry_replaces_the_one_for_the_old_checkpoint(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    old = _written_entry(tmp_path, files).path
    time.sleep(0.02)
    checkpoint(tmp_path / "ckpt", seed=1)  # rewritten: same slot, new key
    new = _written_entry(tmp_path, files).path
    assert new != old
    assert sorted((tmp_path / "cache").iterdir()) == [new]


def test_past_the_cap_the_least_recently_used_entries_go(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    paths = []
    for age, name in enumerate(["c", "b", "a"]):  # c oldest, a newest
        path = root / f"{name}-key.safetensors"
        path.write_bytes(bytes(1000))
        os.utime(path, (1000 + age, 1000 + age))
        paths.append(path)
    removed = weight_cache.evict(root, keep=paths[0], slot="none", max_bytes=2000)
    assert removed == [paths[1]]  # c is kept (just written), b was the least recent
    assert sorted(root.iterdir()) == sorted([paths[0], paths[2]])


def test_off_turns_the_cache_off_and_a_folder_moves_it(monkeypatch, tmp_path: Path) -> None:
    for off in ("off", "no", " False "):  # the words every switch reads as off (envs)
        monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", off)
        assert weight_cache.cache_root() is None
    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", str(tmp_path))
    assert weight_cache.cache_root() == tmp_path
    monkeypatch.delenv("OMNI_CPU_WEIGHT_CACHE")
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "kernels"))
    assert weight_cache.cache_root() == tmp_path / "kernels" / "packed"


def test_describe_lists_entries_from_their_headers(tmp_path: Path) -> None:
    files = [checkpoint(tmp_path / "ckpt")]
    path = _written_entry(tmp_path, files).path
    shown = weight_cache.describe(tmp_path / "cache")
    assert [e["file"] for e in shown["entries"]] == [path.name]
    assert shown["entries"][0]["weights"] == "int8"
    assert shown["bytes"] == path.stat().st_size


def test_an_entry_whose_checkpoint_is_gone_goes_at_the_next_write(tmp_path: Path) -> None:
    gone = [checkpoint(tmp_path / "deleted")]
    old = _written_entry(tmp_path, gone).path
    gone[0].unlink()
    new = _written_entry(tmp_path, [checkpoint(tmp_path / "kept")]).path
    assert sorted((tmp_path / "cache").iterdir()) == [new]
    assert not old.exists()


def test_the_module_shows_the_cache_and_clears_it(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("OMNI_CPU_WEIGHT_CACHE", str(tmp_path / "cache"))
    path = _written_entry(tmp_path, [checkpoint(tmp_path / "ckpt")]).path
    assert weight_cache.main([]) == 0
    assert path.name in capsys.readouterr().out
    assert weight_cache.main(["--clear"]) == 0
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_changed_kernel_source_names_another_build(monkeypatch, tmp_path: Path) -> None:
    # build_name() keys the entries; it is the build folder's name (sources, flags, torch).
    monkeypatch.setenv("OMNI_CPU_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(build, "chosen", lambda: build.AVX512)
    monkeypatch.setattr(build, "load", lambda module: object())  # "built": no compiler here
    names = []
    for version in ("// v1\n", "// v2\n"):
        folder = tmp_path / version[3:5] / "csrc"
        folder.mkdir(parents=True)
        for source in build.AVX512.sources:
            (folder / source).write_text(version)
        monkeypatch.setattr(build, "CSRC", folder)
        names.append(gemv.build_name())
    assert names[0] != names[1]
    files = [checkpoint(tmp_path / "ckpt")]
    assert key(files, build=names[0]).key != key(files, build=names[1]).key


def test_the_key_names_the_numa_nodes_of_this_process_cpus(monkeypatch, tmp_path: Path) -> None:
    """Read as the probe reads them: a replica bound to node 1 keys its own entry."""
    from omni_cpu.hardware.sysroot import SysRoot
    from tests.helpers.machines import FakeMachine

    machine = FakeMachine(tmp_path / "root")
    machine.write("/sys/devices/system/node/node0/cpulist", "0-1")
    machine.write("/sys/devices/system/node/node1/cpulist", "2-3")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3})
    assert weight_cache.numa_nodes(SysRoot(machine.root)) == "1"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 2})
    assert weight_cache.numa_nodes(SysRoot(machine.root)) == "0,1"
    assert weight_cache.numa_nodes(SysRoot(tmp_path / "none")) == ""
