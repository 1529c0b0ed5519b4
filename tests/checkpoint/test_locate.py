"""`--model` located and checked before any engine starts (omni_cpu.checkpoint.locate)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from omni_cpu.checkpoint import locate
from omni_cpu.checkpoint.locate import check_model, checkpoint_folder, looks_like_hub_id
from omni_cpu.errors import ModelError
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.resolve import model_footprint
from tests.helpers.hub import cache_model

HUB_ID = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test sees its own (empty) hub cache, never the machine's."""
    cache = tmp_path / "hub-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return cache


def test_owner_slash_name_reads_as_a_hub_id_and_paths_do_not() -> None:
    assert looks_like_hub_id(HUB_ID)
    assert looks_like_hub_id("checkpoints/tyni")
    for path in ("/no/such", "./checkpoints/tyni", "~/models/x", "models/0.6b/", "a/b/c", "tiny"):
        assert not looks_like_hub_id(path), path


def test_a_missing_path_is_one_line_naming_the_fix() -> None:
    with pytest.raises(ModelError, match=r"^no folder /no/such$") as refused:
        check_model("/no/such")
    assert "make-checkpoint" in refused.value.one_line()


def test_a_folder_without_config_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelError, match=r"is not a Qwen3-TTS checkpoint: no config\.json"):
        check_model(str(tmp_path))


def test_a_file_is_not_a_checkpoint_folder(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\0")
    with pytest.raises(ModelError, match="is a file, not a checkpoint folder"):
        check_model(str(tmp_path / "model.bin"))


def test_another_models_config_is_refused(tmp_path: Path, tiny_checkpoint: Path) -> None:
    folder = tmp_path / "other"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "config.json").write_text('{"model_type": "whisper"}')
    with pytest.raises(ModelError, match=r"'whisper' model, not Qwen3-TTS"):
        check_model(str(folder))


def test_an_unfinished_download_lacks_its_weights(tmp_path: Path, tiny_checkpoint: Path) -> None:
    folder = tmp_path / "half"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(ModelError, match=r"no speech_tokenizer/model\.safetensors"):
        check_model(str(folder))


def test_a_checkpoint_folder_passes(tiny_checkpoint: Path) -> None:
    source = check_model(str(tiny_checkpoint))
    assert source.folder == tiny_checkpoint and source.hub_id is None


def test_a_missing_relative_path_that_reads_as_a_hub_id_is_refused_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints" / "tiny").mkdir(parents=True)  # what make demo leaves
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(locate, "_ask_hub", lambda *_: pytest.fail("offline: no look-up"))
    with pytest.raises(ModelError) as refused:
        check_model("checkpoints/tyni")
    line = refused.value.one_line()
    assert line.startswith("no folder checkpoints/tyni and no hub model checkpoints/tyni")
    assert "HF_HUB_OFFLINE" in line and "\n" not in line


def test_a_hub_id_offline_and_not_cached_names_the_cache_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, empty_hub_cache: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as refused:
        check_model(HUB_ID)
    assert str(refused.value) == (
        f"no hub model {HUB_ID} in the cache {empty_hub_cache}, and HF_HUB_OFFLINE keeps the "
        "hub out"
    )
    assert "pass a checkpoint folder (mounted, in a container)" in refused.value.one_line()


def test_a_hub_id_in_the_cache_is_read_from_it_offline(
    monkeypatch: pytest.MonkeyPatch, empty_hub_cache: Path, tiny_checkpoint: Path
) -> None:
    snapshot = cache_model(empty_hub_cache, "me/tiny-tts", tiny_checkpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = check_model("me/tiny-tts")
    assert source.folder == snapshot and source.hub_id == "me/tiny-tts"
    # The plan sizes it from the cached config, not the 0.6B default.
    tiny = footprint_for_model(str(tiny_checkpoint))
    assert footprint_for_model("me/tiny-tts") == dataclasses.replace(tiny, name="tiny-tts")


def test_a_hub_id_the_hub_does_not_have_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locate, "_ask_hub", lambda *_: "the hub has no such model")
    with pytest.raises(ModelError, match="and the hub has no such model"):
        check_model("checkpoints/tyni")


def test_a_hub_id_the_hub_has_passes_for_the_engines_to_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(locate, "_ask_hub", lambda *_: None)
    source = check_model(HUB_ID)
    assert source.folder is None and source.hub_id == HUB_ID


def test_a_hub_that_does_not_answer_is_given_up_on_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def hangs(hub_id: str, timeout_s: float) -> None:
        time.sleep(30)  # a name look-up that never returns: the thread is left behind

    monkeypatch.setattr(locate, "_ask_hub", hangs)
    with pytest.raises(ModelError, match=r"the hub did not answer within 0\.05 s"):
        check_model("checkpoints/tyni", timeout_s=0.05)


def test_the_disk_only_reader_leaves_an_uncached_hub_id_to_the_engines() -> None:
    assert checkpoint_folder(HUB_ID) is None
    with pytest.raises(ModelError, match=r"no folder models/0\.6b/"):
        checkpoint_folder("models/0.6b/")


def test_the_resolver_refuses_a_missing_model_instead_of_planning_the_default() -> None:
    with pytest.raises(ModelError, match="no folder /no/such"):
        model_footprint("/no/such")
    # A hub id not in the cache is sized by its name, and None where the name says no size.
    assert model_footprint("Qwen/Qwen3-TTS-12Hz-1.7B-Base") == footprint_for_model("1.7b-base")
    assert model_footprint("me/my-voice") is None
