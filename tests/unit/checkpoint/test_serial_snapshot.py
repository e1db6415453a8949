"""The serial-mode snapshot is unpickled only after its sidecar vouches for it
(checkpoint/serial_snapshot.py); everything else is deleted unread."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from sampleforge.checkpoint.serial_snapshot import (
    SIDECAR_SUFFIX,
    SNAPSHOT_FILENAME,
    config_hash,
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


def _write(
    path: Path, state: object, cfg, *, sidecar: dict | None = None, tamper_after: bool = False
) -> None:
    """A snapshot file and, unless `sidecar` is {}, its sidecar (by default a valid one)."""
    torch.save(state, path)
    if sidecar is None:
        sidecar = {
            "format_version": 1,
            "config_hash": config_hash(cfg),
            "sha256": sha256_file(path),
        }
    if sidecar:
        path.with_name(path.name + SIDECAR_SUFFIX).write_text(json.dumps(sidecar))
    if tamper_after:
        torch.save(state, path)  # the same bytes would match: change them
        with open(path, "ab") as f:
            f.write(b"\0")


def test_a_vouched_for_snapshot_is_read_and_consumed(tmp_path):
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    _write(path, {"config_hash": config_hash(cfg), "runner": {"x": 1}}, cfg)
    assert take_snapshot(path, cfg)["runner"] == {"x": 1}
    assert not path.exists() and not path.with_name(path.name + SIDECAR_SUFFIX).exists()


@pytest.mark.parametrize(
    "case",
    ["no_sidecar", "tampered", "other_config", "garbage_sidecar", "not_serial", "snapshots_off"],
)
def test_an_untrusted_or_unwanted_snapshot_is_deleted_without_being_unpickled(tmp_path, case):
    cfg, path = _cfg(tmp_path), tmp_path / SNAPSHOT_FILENAME
    marker = tmp_path / "code_ran"
    hostile = {"config_hash": config_hash(cfg), "payload": _RunsCodeWhenUnpickled(marker)}
    reader = cfg
    if case == "no_sidecar":
        _write(path, hostile, cfg, sidecar={})
    elif case == "tampered":
        _write(path, hostile, cfg, tamper_after=True)
    elif case == "other_config":
        _write(path, hostile, _cfg(tmp_path, learning_rate=1e-2))
    elif case == "garbage_sidecar":
        _write(path, hostile, cfg, sidecar={"sha256": 42})
    elif case == "not_serial":
        _write(path, hostile, cfg)
        reader = _cfg(tmp_path, serial_mode=False)
    else:
        _write(path, hostile, cfg)
        reader = _cfg(tmp_path, serial_snapshot=False)
    assert not marker.exists()
    assert take_snapshot(path, reader) is None
    assert not marker.exists()  # nothing in the file was unpickled
    assert not path.exists() and not path.with_name(path.name + SIDECAR_SUFFIX).exists()


def test_the_hostile_payload_would_run_code_if_unpickled(tmp_path):
    # The check above could pass vacuously if the payload did nothing when loaded.
    marker = tmp_path / "code_ran"
    path = tmp_path / "plain.pt"
    torch.save({"payload": _RunsCodeWhenUnpickled(marker)}, path)
    torch.load(path, weights_only=False)
    assert marker.exists()
    os.unlink(marker)
