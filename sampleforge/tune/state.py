"""What a trial's Ray checkpoint holds, and the checksums that show a copy is exact.

A learner's whole state (weights, optimizer moments and step counts, counters, policy version)
is already on disk: the runner writes a checkpoint of every trained policy at the end of each
`train` call (`checkpoint/store.py`). A Ray checkpoint is therefore a copy of those files:

    config.json                              the run's config (a resume is checked against it)
    checkpoints/p<id>/checkpoint_<v>_<n>.pt  the newest checkpoint of each trained policy that
    checkpoints/p<id>/....pt.sha256          verifies, with its checksum
    sampleforge_tune.json                    who saved it, at how many env steps, checksums

Restoring lays these files into a new, empty experiment folder; a run started there resumes
them as `sampleforge train` resumes an experiment. That is how PBT's exploit copies the weights
and the optimizer state, and how a failed trial picks up where its last checkpoint left it.
The replay of an off-policy learner is not in a checkpoint, so it is not copied: the member
refills it.

Must not: decide when to save or restore (the trainable does), or change the files it copies.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sampleforge.checkpoint import CheckpointStore, policy_checkpoint_dir

STATE_FILE = "sampleforge_tune.json"
CONFIG_FILE = "config.json"
CHECKSUM_SUFFIX = ".sha256"


def export_state(
    experiment_dir: Path, num_policies: int, target: Path, info: Mapping[str, Any]
) -> dict[str, Any]:
    """Copy the run's config and each policy's newest verified checkpoint into `target` (a
    folder Ray gave), with `info` and the checksums in STATE_FILE; returns what STATE_FILE
    holds. RuntimeError if a policy has no checkpoint yet."""
    target = Path(target)
    shutil.copy2(Path(experiment_dir) / CONFIG_FILE, target / CONFIG_FILE)
    states = {}
    for p in range(num_policies):
        loaded = CheckpointStore(policy_checkpoint_dir(experiment_dir, p)).load_latest()
        if loaded is None:
            raise RuntimeError(f"{experiment_dir}: policy {p} has no checkpoint to save")
        states[p], path = loaded
        folder = policy_checkpoint_dir(target, p)
        folder.mkdir(parents=True)
        shutil.copy2(path, folder / path.name)
        shutil.copy2(_sidecar(path), folder / _sidecar(path).name)
    record = {
        **info,
        "optimizer_sha256": optimizer_checksum(states),
        "optimizer_steps": optimizer_steps(states),
    }
    (target / STATE_FILE).write_text(json.dumps(record, indent=2))
    return record


def import_state(source: Path, experiment_dir: Path) -> dict[str, Any]:
    """Lay a Ray checkpoint (`source`, written by export_state) into `experiment_dir`, which
    must not exist yet; returns STATE_FILE's record with "restored_optimizer_sha256", the
    checksum of the optimizer states as copied (each file verified against its sidecar)."""
    source, experiment_dir = Path(source), Path(experiment_dir)
    record = json.loads((source / STATE_FILE).read_text())
    experiment_dir.mkdir(parents=True)
    shutil.copy2(source / CONFIG_FILE, experiment_dir / CONFIG_FILE)
    shutil.copytree(source / "checkpoints", experiment_dir / "checkpoints")
    states = {}
    for folder in sorted((experiment_dir / "checkpoints").iterdir()):
        loaded = CheckpointStore(folder).load_latest()
        if loaded is None:
            raise RuntimeError(f"{source}: no checkpoint in {folder.name}")
        states[int(folder.name.removeprefix("p"))] = loaded[0]
    record["restored_optimizer_sha256"] = optimizer_checksum(states)
    return record


def latest_states(experiment_dir: Path, num_policies: int) -> dict[int, dict]:
    """{policy: state} of each policy's newest verified checkpoint (policies without one left
    out)."""
    states = {}
    for p in range(num_policies):
        loaded = CheckpointStore(policy_checkpoint_dir(experiment_dir, p)).load_latest()
        if loaded is not None:
            states[p] = loaded[0]
    return states


# --- checksums ------------------------------------------------------------------------------
def weights_checksum(state_dicts: Mapping[int, Mapping[str, torch.Tensor]]) -> str:
    """sha256 of every policy's weights ({policy: state_dict}, as `get_parameters` returns):
    names, dtypes, shapes and bytes."""
    return _digest(state_dicts)


def optimizer_checksum(states: Mapping[int, Mapping[str, Any]]) -> str:
    """sha256 of the optimizer state (Adam's moments and step counts) of each policy's
    checkpoint state: the "state" part of every entry named "*optimizer". Param groups (the
    learning rate, the betas) are hyperparameters, which PBT changes on purpose; they are left
    out."""
    return _digest({p: _optimizer_parts(state) for p, state in states.items()})


def optimizer_steps(states: Mapping[int, Mapping[str, Any]]) -> int:
    """The largest optimizer step count in the checkpoint states (0 before the first step):
    a resumed optimizer goes on counting, a fresh one starts again from 0."""
    steps = [
        int(param_state["step"])
        for state in states.values()
        for optimizer in _optimizer_parts(state).values()
        for param_state in optimizer.values()
        if "step" in param_state
    ]
    return max(steps, default=0)


def _optimizer_parts(state: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: value["state"]
        for name, value in state.items()
        if name.endswith("optimizer") and isinstance(value, Mapping)
    }


def _digest(value: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    """Feed `value` to `digest` in a fixed order: mappings by key, sequences in order."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"tensor {tensor.dtype} {tuple(tensor.shape)};".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        digest.update(f"map {len(value)};".encode())
        for key in sorted(value, key=str):
            digest.update(f"{key!s}=".encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"seq {len(value)};".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{value!r};".encode())


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)
