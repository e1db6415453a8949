"""Finding and reading trained policies on disk, and writing self-contained model files.

Responsibility: the places a policy's weights can come from, all loaded weights-only
(``torch.load(weights_only=True)``: nothing in a file is executed):

- an experiment folder (``train_dir/<experiment>``): its ``config.json`` and the latest
  learner checkpoint, ``best`` (best training mean return) or ``best_eval`` (best evaluation
  mean return, written by evaluation during training);
- a checkpoint file (verified against its SHA-256 sidecar by `CheckpointStore.load`);
- a model file written by :func:`save_model_file` (the Python API's ``save``): config and the
  weights of every policy in one file.

A model file is meant to travel, so reading one trusts it with the model only: the settings of
the machine or user that saved it (:data:`MACHINE_LOCAL_SETTINGS`) are left out of the config it
gives, and a config whose settings name a module to import (:data:`IMPORTING_SETTINGS`: a
``module:EnvId`` or ``pettingzoo:<module>`` env, a ``module:name`` encoder, a
``package.module:function`` policy mapping) is refused unless the caller trusts it
(``trust_config=True``) or gives those settings itself. The check runs before the config is
validated, since validating a policy mapping imports it. An experiment folder is trusted as the
run that wrote it is (docs/reliability.md, "What a run trusts").

Must not: build networks, start processes, write into experiment folders, or import anything a
model file names unless trusted.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sampleforge.checkpoint.store import CheckpointError, CheckpointStore, policy_checkpoint_dir
from sampleforge.config import Config, ConfigError, config_from_dict, config_to_dict
from sampleforge.envs.envpool_env import ENVPOOL_PREFIX
from sampleforge.envs.pettingzoo_env import pettingzoo_module
from sampleforge.envs.policy_mapping import BUILT_IN_MAPPINGS
from sampleforge.envs.registry import registered_envs

MODEL_FILE_FORMAT = "sampleforge-model"
MODEL_FILE_VERSION = 1
CHECKPOINT_CHOICES = ("latest", "best", "best_eval")
CONFIG_NAME = "config.json"
_SIDECAR_SUFFIX = ".sha256"
# Settings that belong to the machine or the user that saved a model file, not to the model: a
# model file's config never sets them (the loader's own, its env family's or the defaults do).
MACHINE_LOCAL_SETTINGS = (
    # where a run writes, and under what name
    "train_dir",
    "experiment",
    "restart_behavior",
    # the hardware it ran on
    "device",
    "num_workers",
    "num_inference_workers",
    "learner_torch_threads",
    "learner_precision",
    "learner_bootstrap_thread",
    "learner_threads_spin",
    "learner_threads_adaptive",
    "worker_cpu_affinity",
    # how many machines, and how they met (a model trained under torchrun loads anywhere)
    "distributed",
    "sync_fraction",
    "distributed_timeout_sec",
    # the user's accounts
    "with_wandb",
    "wandb_project",
    "wandb_entity",
    "wandb_group",
)
# Settings whose value may name a module that resolving the setting imports.
IMPORTING_SETTINGS = ("env", "encoder", "policy_mapping")


class PolicyFileError(ValueError):
    """A policy cannot be found or read; the message names the path and what was expected."""


@dataclass(frozen=True)
class SavedPolicy:
    """A trained policy as found on disk: its config, weights per policy id, and origin."""

    cfg: Config
    state_dicts: dict[int, dict[str, torch.Tensor]]
    env_steps: int
    source: Path
    # Read from a model file: `cfg` holds none of the file's MACHINE_LOCAL_SETTINGS.
    from_model_file: bool = False


def read_experiment_config(experiment_dir: Path | str) -> Config:
    """The `Config` saved in an experiment folder's ``config.json``."""
    path = Path(experiment_dir) / CONFIG_NAME
    if not path.is_file():
        raise PolicyFileError(
            f"{experiment_dir} is not an experiment folder: it has no "
            f"{CONFIG_NAME} (pass --train_dir and --experiment of a trained "
            "run, or a folder written by training)"
        )
    try:
        return config_from_dict(json.loads(path.read_text()))
    except (ValueError, ConfigError) as err:
        raise PolicyFileError(f"cannot read {path}: {err}") from None


def find_checkpoint(experiment_dir: Path | str, which: str = "latest", policy_id: int = 0) -> Path:
    """The file of checkpoint `which` (latest: the newest that verifies; best, best_eval, or
    a path) of a policy."""
    if which not in CHECKPOINT_CHOICES:
        path = Path(which)
        if not path.is_file():
            raise PolicyFileError(
                f"checkpoint {which!r} is neither a file nor one of {', '.join(CHECKPOINT_CHOICES)}"
            )
        return path
    folder = policy_checkpoint_dir(Path(experiment_dir), policy_id)
    if which == "latest":
        try:  # the newest that verifies, as a resume takes
            found = CheckpointStore(folder).latest_verified()
        except CheckpointError as err:
            raise PolicyFileError(str(err)) from None
    elif which == "best":
        found = CheckpointStore(folder).best_path
    else:
        found = Path(experiment_dir) / "eval" / f"p{policy_id}" / "best.pt"
    if found is None or not found.is_file():
        hint = (
            " (it is written by evaluation during training: --eval_every_env_steps)"
            if which == "best_eval"
            else ""
        )
        raise PolicyFileError(
            f"no {which} checkpoint of policy {policy_id} in {experiment_dir}{hint}"
        )
    return found


def read_weights_file(path: Path | str, policy_id: int = 0) -> dict[str, torch.Tensor]:
    """A policy's state dict from a checkpoint file or a model file (weights-only)."""
    return _weights_in(_load_state(Path(path)), Path(path), policy_id)


def load_saved_policy(
    path: Path | str,
    checkpoint: str = "latest",
    *,
    trust_config: bool = False,
    replacing: Mapping[str, Any] | None = None,
) -> SavedPolicy:
    """The config and weights of an experiment folder (at `checkpoint`) or a model file.

    For a model file (see the module docstring): `replacing` holds settings the caller gives
    instead of the file's (checked and validated in their place); the file's machine-local
    settings are left out; settings that name a module to import are refused with
    PolicyFileError unless `trust_config`.
    """
    path = Path(path)
    if path.is_dir():
        cfg = read_experiment_config(path)
        state_dicts, env_steps = {}, 0
        for policy_id in range(cfg.num_policies):
            file = find_checkpoint(path, checkpoint, policy_id)
            state = _load_state(file)
            state_dicts[policy_id] = _weights_in(state, file, policy_id)
            env_steps = max(env_steps, int(state.get("env_steps", 0)))
        return SavedPolicy(cfg=cfg, state_dicts=state_dicts, env_steps=env_steps, source=path)
    state = _load_state(path)
    if state.get("format") != MODEL_FILE_FORMAT:
        raise PolicyFileError(
            f"{path} is not a model file written by save() (a checkpoint "
            "holds no config: pass its experiment folder instead)"
        )
    settings = {k: v for k, v in state["config"].items() if k not in MACHINE_LOCAL_SETTINGS}
    replacing = replacing or {}
    # Only what the file itself supplies is distrusted: a setting the caller gives is theirs.
    from_file = {k: v for k, v in settings.items() if k not in replacing}
    settings.update(replacing)
    named = [] if trust_config else named_imports(from_file)
    if named:
        raise PolicyFileError(
            f"the config in {path} names code to import ({', '.join(named)}); a model file is "
            "trusted with weights only: pass trust_config=True if you trust the file, or give "
            "those settings yourself (env=, encoder=, policy_mapping=)"
        )
    try:
        cfg = config_from_dict(settings)
    except ConfigError as err:
        raise PolicyFileError(f"the config in {path} is not valid here: {err}") from None
    return SavedPolicy(
        cfg=cfg,
        state_dicts=dict(state["policies"]),
        env_steps=int(state["env_steps"]),
        source=path,
        from_model_file=True,
    )


def named_imports(settings: Mapping[str, Any]) -> list[str]:
    """The `IMPORTING_SETTINGS` of a config dict whose values would import a module when
    used, as ``name='value'`` (conservatively: any such form, whether or not it is imported
    already)."""
    found = []
    env, encoder, mapping = (settings.get(name) for name in IMPORTING_SETTINGS)
    if isinstance(env, str) and _env_imports_a_module(env):
        found.append(f"env={env!r}")
    if isinstance(encoder, str) and ":" in encoder:  # module:name; built-in names have none
        found.append(f"encoder={encoder!r}")
    if isinstance(mapping, str) and mapping not in BUILT_IN_MAPPINGS:
        found.append(f"policy_mapping={mapping!r}")
    return found


def _env_imports_a_module(name: str) -> bool:
    """Whether resolving env `name` may import a module the name chooses."""
    if ":" not in name or name in registered_envs():
        return False  # a plain id, or a name registered in this process
    if name.startswith(ENVPOOL_PREFIX):
        return False  # an EnvPool task id: imports envpool only
    module = pettingzoo_module(name)
    if module is not None:
        return "/" not in module  # an id in PettingZoo's registry imports pettingzoo only
    return True  # module:EnvId


def save_model_file(
    path: Path | str,
    cfg: Config,
    state_dicts: Mapping[int, Mapping[str, torch.Tensor]],
    env_steps: int,
) -> Path:
    """Write config and weights to one file, atomically (a crash leaves the old file or none)."""
    path = Path(path)
    payload = {
        "format": MODEL_FILE_FORMAT,
        "format_version": MODEL_FILE_VERSION,
        "config": config_to_dict(cfg),
        "env_steps": int(env_steps),
        "policies": {
            int(p): {k: v.detach().cpu() for k, v in sd.items()} for p, sd in state_dicts.items()
        },
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(buffer.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _weights_in(state: Mapping[str, Any], path: Path, policy_id: int) -> dict[str, torch.Tensor]:
    if "model" in state:
        return state["model"]
    if state.get("format") == MODEL_FILE_FORMAT:
        policies = state["policies"]
        if policy_id not in policies:
            raise PolicyFileError(f"{path} holds policies {sorted(policies)}, not {policy_id}")
        return policies[policy_id]
    raise PolicyFileError(
        f"{path} is not a sampleforge checkpoint or model file (no 'model' weights)"
    )


def _load_state(path: Path) -> dict[str, Any]:
    """A checkpoint (checksum verified when it has a sidecar) or model file, weights-only."""
    if not path.is_file():
        raise PolicyFileError(f"{path} does not exist or is not a file")
    if path.with_name(path.name + _SIDECAR_SUFFIX).exists():
        try:
            return CheckpointStore(path.parent).load(path)
        except CheckpointError as err:
            raise PolicyFileError(str(err)) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch reports bad files with assorted types
        raise PolicyFileError(f"cannot load {path}: {str(err).splitlines()[0]}") from None
    if not isinstance(state, dict):
        raise PolicyFileError(f"{path} is not a sampleforge checkpoint or model file")
    if state.get("format") == MODEL_FILE_FORMAT and state["format_version"] > MODEL_FILE_VERSION:
        raise PolicyFileError(
            f"{path} has model format_version {state['format_version']}, "
            f"newer than supported ({MODEL_FILE_VERSION}); upgrade sampleforge"
        )
    return state
