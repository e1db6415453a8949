"""The experiment folder: where a run's config, checkpoints, logs and summary live.

`train_dir/<experiment>/` holds `config.json` (the full config of the latest start, and under
"sources" where each setting came from: default, family, preset or flag),
`checkpoints/p<policy>/`, `progress.csv`, TensorBoard event files and `summary.json`.
Starting again with the same experiment resumes it. Settings that would make the checkpoint
meaningless (env, model, rollout length) may not change on resume; everything else may, and
the changes are reported. Nothing in an existing experiment is deleted unless the user asked
for `restart_behavior=overwrite`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sampleforge.config import Config, ConfigError, config_to_dict
from sampleforge.config.sources import SOURCES_KEY, config_sources
from sampleforge.models.factory import MODEL_SETTINGS

log = logging.getLogger(__name__)

# Written into every experiment folder sampleforge makes or opens: overwrite deletes only
# folders that hold it and a config.json.
MARKER_FILENAME = ".sampleforge_experiment"

# Settings a checkpoint depends on: changing them on resume is refused.
FROZEN_ON_RESUME = (
    "env",
    "algorithm",
    "rollout",
    "num_policies",
    "num_frozen_opponents",
) + MODEL_SETTINGS


@dataclass(frozen=True)
class ExperimentDir:
    path: Path

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    def checkpoint_dir(self, policy_id: int) -> Path:
        return self.path / "checkpoints" / f"p{policy_id}"

    @property
    def marker_path(self) -> Path:
        return self.path / MARKER_FILENAME

    def has_checkpoints(self) -> bool:
        root = self.path / "checkpoints"
        return root.exists() and any(root.rglob("checkpoint_*.pt"))


def prepare_experiment(cfg: Config) -> tuple[ExperimentDir, bool]:
    """Create or reopen the experiment folder; returns it and whether to resume.

    Raises ConfigError, before anything is changed on disk, if a resume would change a setting
    in FROZEN_ON_RESUME, or if the folder is not one sampleforge may write into or delete.
    """
    exp = ExperimentDir(Path(cfg.train_dir) / cfg.experiment_name)
    _check_inside_train_dir(exp.path, Path(cfg.train_dir))
    resume = False
    if exp.path.exists() and cfg.restart_behavior == "overwrite":
        _check_ours(exp)
        shutil.rmtree(exp.path)
    elif exp.config_path.exists():
        saved = json.loads(exp.config_path.read_text())
        changes = config_changes(saved, config_to_dict(cfg))
        check_resume_allowed(changes, exp.path)
        for name, (old, new) in changes.items():
            log.warning("experiment %s: %s changed on resume: %r -> %r", exp.path, name, old, new)
        resume = exp.has_checkpoints()
    exp.path.mkdir(parents=True, exist_ok=True)
    exp.marker_path.touch()
    write_json_atomic(
        exp.config_path, {**config_to_dict(cfg), SOURCES_KEY: dict(config_sources(cfg))}
    )
    return exp, resume


def _check_inside_train_dir(path: Path, train_dir: Path) -> None:
    """The experiment folder is a real folder directly inside train_dir (validation refuses
    names like '..'; this catches a symlink planted in train_dir)."""
    if path.is_symlink():
        raise ConfigError(
            [
                f"experiment folder {path} is a symbolic link: refusing to use it "
                "(give another --experiment)"
            ]
        )
    if path.resolve().parent != train_dir.resolve():
        raise ConfigError([f"experiment folder {path} resolves outside train_dir {train_dir}"])


def _check_ours(exp: ExperimentDir) -> None:
    """Overwrite deletes only a folder that sampleforge made."""
    if not (exp.path.is_dir() and exp.config_path.is_file() and exp.marker_path.is_file()):
        raise ConfigError(
            [
                f"--restart_behavior overwrite: {exp.path} is not a sampleforge "
                f"experiment folder (no config.json and {MARKER_FILENAME}); "
                "refusing to delete it (delete it yourself, or give another "
                "--experiment)"
            ]
        )


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{setting: (saved value, new value)} for every setting that differs."""
    return {k: (saved.get(k), v) for k, v in new.items() if saved.get(k) != v}


def check_resume_allowed(changes: dict[str, tuple[Any, Any]], path: Path) -> None:
    frozen = {k: v for k, v in changes.items() if k in FROZEN_ON_RESUME}
    if frozen:
        diff = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in frozen.items())
        raise ConfigError(
            [
                f"cannot resume experiment {path} with a changed {diff} (use another "
                "--experiment, or --restart_behavior overwrite to start it afresh)"
            ]
        )


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
