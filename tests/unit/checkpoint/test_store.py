"""Unit tests for CheckpointStore: atomicity, pruning, best tracking, corruption handling."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from sampleforge.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    CheckpointError,
    CheckpointStore,
    CheckpointVersionError,
    checkpoint_info,
    policy_checkpoint_dir,
)


class CustomObject:
    """Module-level so it can be pickled into a hostile checkpoint."""

    def __init__(self) -> None:
        self.payload = 42


def _model_state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()  # populate optimizer state (exp_avg etc.)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "env_steps": 1000 * seed,
        "note": "hello",
        "lags": [1, 2.5, None],
    }


def _save_n(store: CheckpointStore, n: int) -> list[Path]:
    return [
        store.save(_model_state(i), env_steps=100 * i, policy_version=i) for i in range(1, n + 1)
    ]


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _assert_state_equal(a: dict, b: dict) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key, value in a.items():
            _assert_state_equal(value, b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_state_equal(x, y)
    else:
        assert a == b


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(policy_checkpoint_dir(tmp_path, 0), keep_last=3)


def test_policy_dir_layout(tmp_path: Path) -> None:
    assert policy_checkpoint_dir(tmp_path, 2) == tmp_path / "checkpoints" / "p2"


def test_empty_store(store: CheckpointStore) -> None:
    assert store.list() == []
    assert store.latest() is None
    assert store.load_latest() is None
    assert not store.directory.exists()  # created lazily


def test_roundtrip_model_and_optimizer(store: CheckpointStore) -> None:
    state = _model_state(7)
    path = store.save(state, env_steps=12345, policy_version=7)

    assert path.name == "checkpoint_000000007_12345.pt"
    assert checkpoint_info(path) == (7, 12345)
    assert _sidecar(path).read_text().split()[0] == _sha256(path)
    loaded, loaded_path = store.load_latest()
    assert loaded_path == path
    assert loaded.pop("format_version") == CHECKPOINT_FORMAT_VERSION
    _assert_state_equal(state, loaded)

    model = torch.nn.Linear(4, 2)
    model.load_state_dict(loaded["model"])
    torch.optim.Adam(model.parameters()).load_state_dict(loaded["optimizer"])


def test_save_does_not_mutate_caller_state(store: CheckpointStore) -> None:
    state = {"x": 1}
    store.save(state, env_steps=1, policy_version=1)
    assert state == {"x": 1}


def test_list_orders_by_version_then_env_steps(store: CheckpointStore) -> None:
    store.keep_last = 10
    store.save({}, env_steps=50, policy_version=10)
    store.save({}, env_steps=900, policy_version=2)
    store.save({}, env_steps=60, policy_version=10)
    assert [checkpoint_info(p) for p in store.list()] == [(2, 900), (10, 50), (10, 60)]
    assert checkpoint_info(store.latest()) == (10, 60)


def test_keep_last_pruning(store: CheckpointStore) -> None:
    paths = _save_n(store, 5)
    assert store.list() == paths[-3:]
    for old in paths[:2]:
        assert not old.exists() and not _sidecar(old).exists()
    for kept in paths[-3:]:
        assert _sidecar(kept).exists()


def test_best_tracking(store: CheckpointStore) -> None:
    store.keep_last = 1
    store.save({"v": 1}, env_steps=10, policy_version=1, mean_return=5.0)
    store.save({"v": 2}, env_steps=20, policy_version=2, mean_return=9.0)
    store.save({"v": 3}, env_steps=30, policy_version=3, mean_return=7.0)
    store.save({"v": 4}, env_steps=40, policy_version=4)
    store.save({"v": 5}, env_steps=50, policy_version=5, mean_return=float("nan"))

    assert store.best_mean_return == 9.0
    info = json.loads((store.directory / "best.json").read_text())
    assert info["mean_return"] == 9.0 and info["env_steps"] == 20 and info["policy_version"] == 2
    # Pruning (keep_last=1) removed checkpoint v2, but best.pt survives with its content.
    assert [checkpoint_info(p) for p in store.list()] == [(5, 50)]
    assert store.load(store.best_path)["v"] == 2
    assert _sidecar(store.best_path).read_text().split()[0] == _sha256(store.best_path)
    assert store.best_path not in store.list()

    # The best score survives a restart, so a worse run cannot replace best.pt.
    reopened = CheckpointStore(store.directory, keep_last=1)
    assert reopened.best_mean_return == 9.0
    reopened.save({"v": 6}, env_steps=60, policy_version=6, mean_return=8.0)
    assert reopened.load(reopened.best_path)["v"] == 2
    reopened.save({"v": 7}, env_steps=70, policy_version=7, mean_return=10.0)
    assert reopened.load(reopened.best_path)["v"] == 7
    assert len(_sidecar(reopened.best_path).read_text().splitlines()) == 1


def test_best_holds_the_part_of_the_state_the_caller_names(store: CheckpointStore) -> None:
    """A learner's checkpoint with its replay: best.pt keeps the weights without the replay."""
    weights, replay = {"w": torch.arange(3.0)}, {"frames": torch.zeros(1000, dtype=torch.uint8)}
    path = store.save(
        {**weights, "replay": replay}, env_steps=10, policy_version=1, mean_return=5.0,
        best_state=weights,
    )  # fmt: skip
    assert set(store.load(path)) == {"w", "replay", "format_version"}
    best = store.load(store.best_path)
    assert set(best) == {"w", "format_version"} and torch.equal(best["w"], weights["w"])
    assert _sidecar(store.best_path).read_text().split()[0] == _sha256(store.best_path)
    # Not a new best: best.pt stays; a non-plain best_state is refused before anything is written.
    store.save({"w": torch.ones(3)}, env_steps=20, policy_version=2, mean_return=4.0,
               best_state={"w": torch.ones(3)})  # fmt: skip
    assert torch.equal(store.load(store.best_path)["w"], weights["w"])
    with pytest.raises(CheckpointError, match=r"best_state\['obj'\]"):
        store.save({"w": torch.ones(3)}, env_steps=30, policy_version=3, mean_return=9.0,
                   best_state={"obj": CustomObject()})  # fmt: skip
    assert len(store.list()) == 2 and store.best_mean_return == 5.0


def test_crash_during_write_keeps_previous(store: CheckpointStore, monkeypatch) -> None:
    paths = _save_n(store, 3)
    before = sorted(os.listdir(store.directory))

    def exploding_save(obj, f, *args, **kwargs):
        f.write(b"partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", exploding_save)
    with pytest.raises(OSError, match="disk full"):
        store.save(_model_state(9), env_steps=900, policy_version=9)

    assert sorted(os.listdir(store.directory)) == before  # nothing pruned, no temp left
    assert store.latest() == paths[-1]
    _, loaded_path = store.load_latest()
    assert loaded_path == paths[-1]


def test_crash_at_rename_keeps_previous(store: CheckpointStore, monkeypatch) -> None:
    paths = _save_n(store, 3)
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith(".pt"):
            raise OSError("power cut")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="power cut"):
        store.save(_model_state(9), env_steps=900, policy_version=9, mean_return=100.0)
    monkeypatch.setattr(os, "replace", real_replace)

    assert store.list() == paths
    assert store.latest() == paths[-1]
    assert store.best_mean_return is None
    assert not list(store.directory.glob(".*.tmp"))
    assert store.load_latest()[1] == paths[-1]


def _fsyncs_and_renames(monkeypatch, save: Callable[[], Path]) -> list[tuple[str, int]]:
    """What `save` fsynced and renamed, in order, as ("fsync" | "replace", inode)."""
    events: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        events.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def spy_replace(src, dst) -> None:
        events.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", spy_fsync)
        patch.setattr(os, "replace", spy_replace)
        save()
    return events


def _assert_durable(files: list[Path], directory: Path, events: list[tuple[str, int]]) -> None:
    folder = os.stat(directory).st_ino
    for file in files:
        inode = os.stat(file).st_ino  # a rename keeps the inode the temp file had
        assert ("fsync", inode) in events, f"{file.name} was not fsynced"
        synced, renamed = events.index(("fsync", inode)), events.index(("replace", inode))
        assert synced < renamed, f"{file.name} was renamed before it was fsynced"
        assert ("fsync", folder) in events[renamed:], f"no folder fsync after {file.name}"


def test_every_file_is_fsynced_before_its_rename_and_the_folder_after(
    store: CheckpointStore, monkeypatch
) -> None:
    # A rename that reaches the disk before the file's data, or a rename lost in a power cut,
    # leaves a checkpoint that looks valid and is not whole, or is not there.
    saved: list[Path] = []
    events = _fsyncs_and_renames(
        monkeypatch,
        lambda: saved.append(store.save(_model_state(1), env_steps=1, policy_version=1)),
    )
    _assert_durable([saved[0], _sidecar(saved[0])], store.directory, events)

    best_files = [store.best_path, _sidecar(store.best_path), store.directory / "best.json"]
    events = _fsyncs_and_renames(
        monkeypatch,
        lambda: store.save(_model_state(2), env_steps=2, policy_version=2, mean_return=1.0),
    )
    _assert_durable(best_files, store.directory, events)


def test_stale_temp_files_ignored_then_removed(store: CheckpointStore) -> None:
    paths = _save_n(store, 1)
    # What a SIGKILL mid-save leaves: a temp file and maybe an orphan sidecar.
    stale = store.directory / ".checkpoint_000000009_900.pt.123-abcd.tmp"
    stale.write_bytes(b"half a checkpoint")
    orphan = store.directory / "checkpoint_000000009_900.pt.sha256"
    orphan.write_text("0" * 64 + "  checkpoint_000000009_900.pt\n")

    assert store.list() == paths
    assert store.latest() == paths[0]
    store.save({}, env_steps=200, policy_version=2)
    assert not stale.exists()
    assert not orphan.exists()


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "delete_sidecar"])
def test_corrupt_latest_falls_back_with_warning(store: CheckpointStore, damage: str) -> None:
    paths = _save_n(store, 3)
    latest = paths[-1]
    if damage == "truncate":
        latest.write_bytes(latest.read_bytes()[:100])
    elif damage == "bitflip":
        data = bytearray(latest.read_bytes())
        data[len(data) // 2] ^= 0x01
        latest.write_bytes(bytes(data))
    else:
        _sidecar(latest).unlink()

    with pytest.warns(RuntimeWarning, match=latest.name) as record:
        state, path = store.load_latest()
    assert path == paths[-2]
    assert paths[-2].name in str(record[0].message)
    _assert_state_equal(_model_state(2), {k: v for k, v in state.items() if k != "format_version"})


def test_all_corrupt_raises(store: CheckpointStore) -> None:
    for path in _save_n(store, 2):
        path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="all 2 checkpoints"):
        store.load_latest()


def test_pickled_object_refused(store: CheckpointStore) -> None:
    path = store.save({"x": 1}, env_steps=1, policy_version=1)
    # Forge a file with a valid checksum that smuggles in an arbitrary object.
    torch.save({"format_version": 1, "evil": CustomObject()}, path)
    _sidecar(path).write_text(f"{_sha256(path)}  {path.name}\n")

    with pytest.raises(CheckpointError, match="refusing"):
        store.load(path)


def test_save_refuses_non_plain_state(store: CheckpointStore) -> None:
    with pytest.raises(CheckpointError, match=r"state\['cfg'\]\['obj'\]"):
        store.save({"cfg": {"obj": CustomObject()}}, env_steps=1, policy_version=1)
    assert store.list() == []


def test_future_format_version_refused(store: CheckpointStore) -> None:
    older = store.save({"x": 1}, env_steps=1, policy_version=1)
    path = store.save({"x": 2}, env_steps=2, policy_version=2)
    future = CHECKPOINT_FORMAT_VERSION + 1
    torch.save({"format_version": future, "x": 2}, path)
    _sidecar(path).write_text(f"{_sha256(path)}  {path.name}\n")

    message = rf"format_version {future}.*format_version {CHECKPOINT_FORMAT_VERSION}"
    with pytest.raises(CheckpointVersionError, match=message):
        store.load(path)
    # A version mismatch is not corruption: no silent fallback to `older`.
    with pytest.raises(CheckpointError, match=message):
        store.load_latest()
    assert store.load(older)["x"] == 1


def test_keep_last_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep_last=0)


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
