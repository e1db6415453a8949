"""Exact resume in serial mode: the whole system's state at the moment training stopped.

A checkpoint holds the learner's state (model, optimizer, counters), which is all a resumed run
needs to continue training, but not to continue *identically*: envs mid-episode, half-filled
trajectory slots, queued messages and random-number streams are lost. In serial mode every
component lives in the runner's process and runs in a fixed order, so the runner can capture
all of it at the end of a loop iteration, before anything reacts to the stop. A resumed run
restores that state and goes on exactly as if it had never stopped: with a fixed seed, N env
steps straight equal N/2 + restart + N/2, bit for bit.

The snapshot (`serial_state.pt` in the experiment folder) holds pickled envs, so unlike
checkpoints it is loaded with pickle, which can run code. So nothing in it is unpickled before
its plain-JSON sidecar (`serial_state.pt.json`: SHA-256 of the file, the hash of the config
that wrote it, format version) has been read and both hashes match: a file dropped into the
folder, or one from another config, is deleted unread. (Whoever can write both files can still
run code on the next serial resume: the experiment folder is trusted, docs/reliability.md.)

A snapshot continues one checkpoint, the final one its run wrote just after it: once that is on
disk the runner binds the snapshot to it (`bind_snapshot`: each policy's checkpoint name and
SHA-256 in the sidecar). A resume restores it only if every learner resumed from exactly those
checkpoints; otherwise (no binding because the run died first, a newer checkpoint, another
lineage's checkpoint) it is deleted unread with a warning.
`--serial_snapshot false` neither writes nor reads it. It is consumed (deleted) by the next
start in any mode, so a stale one is never restored. Envs that cannot be pickled only lose
exactness: the run resumes from the checkpoint as usual, with a warning.

Must not: be used in multi-process mode, where components run concurrently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from sampleforge.checkpoint.store import sha256_file
from sampleforge.comms.queues import receive, send_many
from sampleforge.config import Config, config_to_dict

log = logging.getLogger(__name__)

SNAPSHOT_FILENAME = "serial_state.pt"
SIDECAR_SUFFIX = ".json"  # serial_state.pt.json, plain JSON: read before anything is unpickled
# 2: the sidecar names the checkpoints the snapshot belongs to; 3: the run's episode window
# is a PopulationEpisodeWindows
FORMAT_VERSION = 3


class Snapshotable(Protocol):
    """A component whose state a serial-mode snapshot captures."""

    def snapshot_state(self) -> dict: ...

    def restore_state(self, state: dict) -> None: ...


@dataclass(frozen=True)
class SystemState:
    """What a snapshot captures besides the runner's counters, as the runner hands it over:
    the components (inline, in serial mode), every queue by name, and every shared tensor by
    name. Plain data: this module never reaches into the runner's wiring or host."""

    components: Mapping[str, Snapshotable]
    queues: Mapping[str, Any]
    tensors: Mapping[str, torch.Tensor]


def save_snapshot(path: Path, cfg: Config, runner_state: dict, system: SystemState) -> bool:
    """Capture the system and write it atomically, not yet bound to a checkpoint (see
    `bind_snapshot`); False (with a warning) if it cannot be. Any older snapshot is deleted
    first: it belongs to an older checkpoint."""
    try:
        _delete(path)
        state = {
            "format_version": FORMAT_VERSION,
            "config_hash": config_hash(cfg),
            "runner": runner_state,
            "rng": _rng_states(),
            "components": {n: c.snapshot_state() for n, c in system.components.items()},
            "queues": _drain_and_refill(system.queues),
            "tensors": {k: t.clone() for k, t in system.tensors.items()},
        }
        tmp, tmp_sidecar = _temporaries(path)
        torch.save(state, tmp)
        header = {
            "format_version": FORMAT_VERSION,
            "config_hash": state["config_hash"],
            "sha256": sha256_file(tmp),
            "checkpoints": None,  # set by bind_snapshot once the final checkpoint is written
        }
        sidecar = _sidecar(path)
        tmp_sidecar.write_text(json.dumps(header))
        # data first: a stop between the two leaves a mismatch, which is refused
        os.replace(tmp, path)
        os.replace(tmp_sidecar, sidecar)
        return True
    except Exception as e:  # noqa: BLE001 - exactness is a bonus, never a reason to fail a run
        for tmp in _temporaries(path):  # a full disk leaves nothing half-written
            tmp.unlink(missing_ok=True)
        log.warning(
            "no exact-resume snapshot (%s: %s); a resume continues from the checkpoint",
            type(e).__name__,
            e,
        )
        return False


def bind_snapshot(path: Path, checkpoints: Mapping[int, str | Path]) -> bool:
    """Record in the sidecar that the snapshot at `path` continues `checkpoints` ({policy id:
    the final checkpoint its run wrote}). False if there is no snapshot; if it cannot be
    bound, it is deleted with a warning (unbound, no resume would use it)."""
    sidecar = _sidecar(path)
    if not path.exists():
        return False
    try:
        header = json.loads(sidecar.read_text())
        header["checkpoints"] = {str(p): _identity(c) for p, c in checkpoints.items()}
        tmp = _temporaries(path)[1]
        tmp.write_text(json.dumps(header))
        os.replace(tmp, sidecar)
        return True
    except (OSError, ValueError, TypeError) as e:
        log.warning("deleting the exact-resume snapshot %s: cannot bind it (%s)", path, e)
        _delete(path)
        _temporaries(path)[1].unlink(missing_ok=True)
        return False


def take_snapshot(
    path: Path, cfg: Config, resumed_from: Mapping[int, str | Path | None]
) -> dict | None:
    """Read and delete the snapshot; None if there is none, or if it is not to be used or
    not to be trusted (then it is never unpickled). `resumed_from`: {policy id: the checkpoint
    its learner resumed from, or None}; the snapshot must belong to exactly those."""
    if not path.exists():
        _sidecar(path).unlink(missing_ok=True)
        return None
    try:
        refusal = _refusal(path, cfg, resumed_from)
        if refusal is not None:
            log.warning(
                "ignoring the exact-resume snapshot %s: %s; resuming from the checkpoint",
                path,
                refusal,
            )
            return None
        return torch.load(path, weights_only=False)  # verified above: see the module docstring
    finally:
        _delete(path)


def _temporaries(path: Path) -> tuple[Path, Path]:
    """Where the snapshot and its sidecar are written before they are renamed into place."""
    return path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.json.tmp")


def _delete(path: Path) -> None:
    path.unlink(missing_ok=True)
    _sidecar(path).unlink(missing_ok=True)


def _identity(checkpoint: str | Path) -> dict[str, str]:
    """What tells a checkpoint from any other: its name, and its content's SHA-256."""
    return {"name": Path(checkpoint).name, "sha256": sha256_file(Path(checkpoint))}


def _refusal(path: Path, cfg: Config, resumed_from: Mapping[int, str | Path | None]) -> str | None:
    """Why the snapshot at `path` must not be unpickled by this run, or None."""
    if not cfg.serial_mode:
        return "it is for serial mode only"
    if not cfg.serial_snapshot:
        return "--serial_snapshot is false"
    try:
        header = json.loads(_sidecar(path).read_text())
    except (OSError, ValueError) as e:
        return f"no readable {_sidecar(path).name} ({type(e).__name__})"
    if not isinstance(header, dict) or header.get("format_version") != FORMAT_VERSION:
        return f"{_sidecar(path).name} is not a format {FORMAT_VERSION} header"
    if header.get("config_hash") != config_hash(cfg):
        return "written for another config"
    if header.get("sha256") != sha256_file(path):
        return "its SHA-256 does not match its sidecar (changed or replaced)"
    return _checkpoint_mismatch(header.get("checkpoints"), resumed_from)


def _checkpoint_mismatch(bound: Any, resumed_from: Mapping[int, str | Path | None]) -> str | None:
    """Why the checkpoints the learners resumed from are not the ones the snapshot continues."""
    if not isinstance(bound, dict) or not bound:
        return "it belongs to no checkpoint (its run stopped before its final checkpoint)"
    loaded = {str(p): c for p, c in resumed_from.items()}
    if set(bound) != set(loaded):
        return f"it is for policies {sorted(bound)}, this run has {sorted(loaded)}"
    for policy, entry in sorted(bound.items()):
        checkpoint = loaded[policy]
        name = entry.get("name") if isinstance(entry, dict) else None
        try:
            same = checkpoint is not None and _identity(checkpoint) == entry
        except OSError:
            same = False  # gone since its learner loaded it
        if not same:
            return (
                f"it continues checkpoint {name} of policy {policy}, but this run resumed "
                f"from {Path(checkpoint).name if checkpoint else 'no checkpoint'}"
            )
    return None


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def restore_snapshot(state: dict, system: SystemState) -> dict:
    """Put every component, queue, shared tensor and RNG back; returns the runner's state."""
    for name, component in system.components.items():
        component.restore_state(state["components"][name])
    for key, tensor in system.tensors.items():
        tensor.copy_(state["tensors"][key])
    queues = system.queues
    for key, messages in state["queues"].items():
        receive(queues[key], 0.0)  # whatever start-up put there is superseded
        if messages:
            send_many(queues[key], messages)
    _set_rng_states(state["rng"])
    return state["runner"]


def config_hash(cfg: Config) -> str:
    """Identifies the settings a snapshot is valid for (not the stopping criteria)."""
    data = {
        k: v
        for k, v in config_to_dict(cfg).items()
        if k not in ("train_for_env_steps", "train_for_seconds", "restart_behavior")
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _drain_and_refill(queues: Mapping[str, Any]) -> dict[str, list]:
    """Every queued message, in order; the queues are left as they were."""
    contents = {}
    for key, queue in queues.items():
        contents[key] = receive(queue, 0.0)
        if contents[key]:
            send_many(queue, contents[key])
    return contents


def _rng_states() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def _set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
