"""The serial-mode snapshot is unpickled only after its sidecar vouches for it, and only onto
the checkpoint it continues (checkpoint/serial_snapshot.py); everything else is deleted
unread."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from sampleforge.checkpoint.serial_snapshot import (
    FORMAT_VERSION,
    SIDECAR_SUFFIX,
    SNAPSHOT_FILENAME,
    SystemState,
    bind_snapshot,
    config_hash,
    save_snapshot,
    take_snapshot,
)
from sampleforge.checkpoint.store import sha256_file
from sampleforge.config import make_config

MARKER_ENV = "SAMPLEFORGE_TEST_UNPICKLED"


class _RunsCodeWhenUnpickled:
    """What a hostile snapshot would hold: unpickling it creates the file named by its path."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _cfg(tmp_path: Path, **overrides):
    settings = {"env": "CartPole-v1", "train_dir": str(tmp_path), "serial_mode": True}
    return make_config(**{**settings, **overrides})


def _checkpoint(tmp_path: Path, content: bytes = b"weights", policy: int = 0) -> Path:
    """A stand-in for a learner's checkpoint (only its name and bytes matter here)."""
    path = tmp_path / "checkpoints" / f"p{policy}" / "checkpoint_000000010_2048.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _write(
    path: Path,
    state: object,
    cfg,
    *,
    sidecar: dict | None = None,
    tamper_after: bool = False,
    bound_to: Path | None = None,
) -> None:
    """A snapshot file and, unless `sidecar` is {}, its sidecar (by default a valid one,
    bound to the checkpoint `bound_to` of policy 0 when given)."""
    torch.save(state, path)
    if sidecar is None:
        sidecar = {
            "format_version": FORMAT_VERSION,
            "config_hash": config_hash(cfg),
            "sha256": sha256_file(path),
            "checkpoints": None,
        }
    if sidecar:
        path.with_name(path.name + SIDECAR_SUFFIX).write_text(json.dumps(sidecar))
    if bound_to is not None:
        assert bind_snapshot(path, {0: bound_to})
    if tamper_after:
        torch.save(state, path)  # the same bytes would match: change them
        with open(path, "ab") as f:
            f.write(b"\0")


def _gone(path: Path) -> bool:
    return not path.exists() and not path.with_name(path.name + SIDECAR_SUFFIX).exists()


def test_a_vouched_for_snapshot_is_read_and_consumed(tmp_path):
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    checkpoint = _checkpoint(tmp_path)
    _write(path, {"config_hash": config_hash(cfg), "runner": {"x": 1}}, cfg, bound_to=checkpoint)
    assert take_snapshot(path, cfg, {0: str(checkpoint)})["runner"] == {"x": 1}
    assert _gone(path)


@pytest.mark.parametrize(
    "case",
    ["no_sidecar", "tampered", "other_config", "garbage_sidecar", "not_serial", "snapshots_off"],
)
def test_an_untrusted_or_unwanted_snapshot_is_deleted_without_being_unpickled(tmp_path, case):
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    marker = tmp_path / "code_ran"
    hostile = {"config_hash": config_hash(cfg), "payload": _RunsCodeWhenUnpickled(marker)}
    reader = cfg
    checkpoint = _checkpoint(tmp_path)
    if case == "no_sidecar":
        _write(path, hostile, cfg, sidecar={})
    elif case == "tampered":
        _write(path, hostile, cfg, tamper_after=True, bound_to=checkpoint)
    elif case == "other_config":
        _write(path, hostile, _cfg(tmp_path, learning_rate=1e-2), bound_to=checkpoint)
    elif case == "garbage_sidecar":
        _write(path, hostile, cfg, sidecar={"sha256": 42})
    elif case == "not_serial":
        _write(path, hostile, cfg, bound_to=checkpoint)
        reader = _cfg(tmp_path, serial_mode=False)
    else:
        _write(path, hostile, cfg, bound_to=checkpoint)
        reader = _cfg(tmp_path, serial_snapshot=False)
    assert not marker.exists()
    assert take_snapshot(path, reader, {0: str(checkpoint)}) is None
    assert not marker.exists()  # nothing in the file was unpickled
    assert _gone(path)


@pytest.mark.parametrize(
    "case", ["never_bound", "another_lineage", "newer_checkpoint", "fresh_start", "policies"]
)
def test_a_snapshot_is_restored_only_onto_the_checkpoint_it_continues(tmp_path, case, caplog):
    # Issue 40: a fresh run's snapshot was restored on top of another lineage's checkpoint,
    # and the log said "exact resume".
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    marker = tmp_path / "code_ran"
    hostile = {"config_hash": config_hash(cfg), "payload": _RunsCodeWhenUnpickled(marker)}
    ours = _checkpoint(tmp_path / "ours", b"our lineage")
    loaded: dict = {0: str(ours)}
    if case == "never_bound":  # the run died between the snapshot and its final checkpoint
        _write(path, hostile, cfg)
    else:
        _write(path, hostile, cfg, bound_to=ours)
    if case == "another_lineage":  # same file name, other weights
        loaded = {0: str(_checkpoint(tmp_path / "theirs", b"their lineage"))}
    elif case == "newer_checkpoint":
        newer = ours.with_name("checkpoint_000000011_2304.pt")
        newer.write_bytes(b"our lineage, later")
        loaded = {0: str(newer)}
    elif case == "fresh_start":
        loaded = {0: None}
    elif case == "policies":
        loaded = {0: str(ours), 1: str(_checkpoint(tmp_path / "ours", b"p1", policy=1))}
    assert take_snapshot(path, cfg, loaded) is None
    assert not marker.exists()  # refused before anything was unpickled
    assert _gone(path)
    assert "ignoring the exact-resume snapshot" in caplog.text


def test_save_snapshot_on_a_full_disk_leaves_nothing_half_written(tmp_path, monkeypatch):
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    _write(path, {"old": True}, cfg, bound_to=_checkpoint(tmp_path))  # the last train call's

    def full_disk(state, file):
        Path(file).write_bytes(b"half a snapshot")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    nothing = SystemState(components={}, queues={}, tensors={"t": torch.zeros(1)})
    assert save_snapshot(path, cfg, {}, nothing) is False
    # Neither a temporary file nor the older snapshot (it continues an older checkpoint).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]


def test_the_hostile_payload_would_run_code_if_unpickled(tmp_path):
    # The check above could pass vacuously if the payload did nothing when loaded.
    marker = tmp_path / "code_ran"
    path = tmp_path / "plain.pt"
    torch.save({"payload": _RunsCodeWhenUnpickled(marker)}, path)
    torch.load(path, weights_only=False)
    assert marker.exists()
    os.unlink(marker)
