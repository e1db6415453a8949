"""Where `set_parameters` takes a policy's weights from on disk: a file, or a folder of
checkpoints.

A file is a checkpoint (`checkpoints/p0/checkpoint_*.pt`, `best.pt`, `eval/p0/best.pt`) or a
model file written by `save`. A folder is what an outside driver (a population, a search) has
at hand: another run's experiment folder, its `checkpoints/` folder, or one policy's
`checkpoints/p<id>/`. From a folder the newest checkpoint that verifies is used, as a resume
does (`CheckpointStore.load_latest`: a corrupt newest one is skipped with a warning). Every
file is loaded weights-only.

Must not: build networks, start processes or write anything.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sampleforge.checkpoint.store import CheckpointError, CheckpointStore
from sampleforge.evaluation.policy_files import PolicyFileError, read_weights_file

StateDict = dict[str, torch.Tensor]


def read_parameter_source(source: str | Path, policy_id: int) -> StateDict:
    """`policy_id`'s weights in the file or folder `source`; PolicyFileError (a ValueError),
    on one line naming the path, when there are none."""
    path = Path(source)
    if not path.is_dir():
        return read_weights_file(path, policy_id)
    folder = checkpoint_folder(path, policy_id)
    if folder is None:
        raise PolicyFileError(
            f"{path} holds no checkpoint of policy {policy_id} (expected an experiment folder, "
            f"its checkpoints/ folder or a checkpoints/p{policy_id}/ folder with "
            "checkpoint_*.pt files)"
        )
    try:
        found = CheckpointStore(folder).load_latest()
    except CheckpointError as err:  # every checkpoint there is unusable, or too new
        raise PolicyFileError(f"{path}: {err}") from None
    assert found is not None  # checkpoint_folder found checkpoint files there
    state, file = found
    if not isinstance(state.get("model"), dict):
        raise PolicyFileError(f"{file} is not a sampleforge checkpoint (no 'model' weights)")
    return state["model"]


def checkpoint_folder(path: Path, policy_id: int) -> Path | None:
    """The folder of `policy_id`'s checkpoints that `path` names, or None: `path` itself if it
    holds checkpoint files (a `checkpoints/p<id>/` folder), else `path/p<id>` (a checkpoints
    folder) or `path/checkpoints/p<id>` (an experiment folder)."""
    for folder in (path, path / f"p{policy_id}", path / "checkpoints" / f"p{policy_id}"):
        if CheckpointStore(folder).list():
            return folder
    return None
