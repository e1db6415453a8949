"""The experiment folder: where a run's config, checkpoints, logs and summary live.

`train_dir/<experiment>/` holds `config.json` (the full config of the latest start, and under
"sources" where each setting came from: default, family, preset or flag),
`checkpoints/p<policy>/`, `progress.csv`, TensorBoard event files and `summary.json`.
Starting again with the same experiment resumes it. Settings that would make the checkpoint
meaningless (env, model, rollout length) may not change on resume; everything else may, and
the changes are reported. Nothing in an existing experiment is deleted unless the user asked
for `restart_behavior=overwrite`. One run at a time: the folder is prepared under the
experiment's lock (`experiment_lock.py`), which the runner holds until it closes. Checkpoints
without a readable config.json are refused rather than silently restarted from zero.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sampleforge.checkpoint.experiment_lock import ExperimentLock, lock_path
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
    "drop_obs_keys",  # the env's observation keys, so the model's inputs
    "algorithm",
    "rollout",
    "num_policies",
    "num_frozen_opponents",
    # The continuous-control critics: the learner's networks, beside the policy's.
    "num_critics",
    "critic_hidden_sizes",
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


def lock_experiment(cfg: Config) -> ExperimentLock:
    """The experiment's lock, for a run to hold until it closes (checkpoint/experiment_lock.py);
    ConfigError naming the holder if another live run has it."""
    return ExperimentLock.acquire(Path(cfg.train_dir), cfg.experiment_name)


def prepare_experiment(
    cfg: Config, lock: ExperimentLock | None = None
) -> tuple[ExperimentDir, bool]:
    """Create or reopen the experiment folder; returns it and whether to resume.

    `lock`: the experiment's lock, held by the caller (the runner, for its whole life). Without
    one, the lock is taken for the time of this call only. Either way nothing in the folder
    changes while another run holds it.

    Raises ConfigError, before anything is changed on disk, if another run holds the
    experiment, a resume would change a setting in FROZEN_ON_RESUME, the folder's config.json
    is missing (beside checkpoints) or unreadable, or the folder is not one sampleforge may
    write into or delete; and, with nothing half-written left, if the folder cannot be written.
    """
    exp = ExperimentDir(Path(cfg.train_dir) / cfg.experiment_name)
    _check_inside_train_dir(exp.path, Path(cfg.train_dir))
    if lock is not None:
        if (
            not lock.held
            or lock.path != lock_path(Path(cfg.train_dir), cfg.experiment_name).absolute()
        ):
            raise ValueError(f"prepare_experiment: {lock.path} is not a held lock of {exp.path}")
        return _prepare(exp, cfg)
    with lock_experiment(cfg):
        return _prepare(exp, cfg)


def _prepare(exp: ExperimentDir, cfg: Config) -> tuple[ExperimentDir, bool]:
    resume = False
    try:
        if exp.path.exists() and cfg.restart_behavior == "overwrite":
            _check_ours(exp)
            shutil.rmtree(exp.path)
        elif exp.config_path.exists() or exp.has_checkpoints():
            saved = _read_saved_config(exp)
            changes = config_changes(saved, config_to_dict(cfg))
            check_resume_allowed(changes, exp.path)
            for name, (old, new) in changes.items():
                log.warning(
                    "experiment %s: %s changed on resume: %r -> %r", exp.path, name, old, new
                )
            resume = exp.has_checkpoints()
        _write_config(exp, cfg)
    except OSError as e:  # a read-only or full disk, a folder where a file should be, ...
        where = f" ({e.filename})" if e.filename else ""
        raise ConfigError(
            [
                f"cannot write the experiment folder {exp.path}: {e.strerror or e}{where}; "
                "free some space or give a writable --train_dir"
            ]
        ) from None
    return exp, resume


def _write_config(exp: ExperimentDir, cfg: Config) -> None:
    """config.json and the marker; a folder this call made is removed again if that fails,
    and an existing config.json is left as it was (write_json_atomic)."""
    made = not exp.path.exists()
    try:
        exp.path.mkdir(parents=True, exist_ok=True)
        exp.marker_path.touch()
        write_json_atomic(
            exp.config_path, {**config_to_dict(cfg), SOURCES_KEY: dict(config_sources(cfg))}
        )
    except OSError:
        if made:
            shutil.rmtree(exp.path, ignore_errors=True)
        raise


def _read_saved_config(exp: ExperimentDir) -> dict[str, Any]:
    """The config.json a resume is checked against; ConfigError if there are checkpoints but
    no config.json (a run from zero would interleave its checkpoints with theirs, and the
    next resume would load the old lineage), or if it is unreadable."""
    what_to_do = (
        f"put back its config.json to resume it, or move {exp.path} away (or give another "
        "--experiment) to start afresh"
    )
    if not exp.config_path.exists():
        raise ConfigError(
            [f"experiment {exp.path} has checkpoints but no config.json: {what_to_do}"]
        )
    try:
        saved = json.loads(exp.config_path.read_text())
    except (ValueError, UnicodeDecodeError) as e:  # OSError: see _prepare
        problem = f"is not valid JSON ({str(e).splitlines()[0]})"
    else:
        if isinstance(saved, dict):
            return saved
        problem = f"holds a JSON {type(saved).__name__}, not a config"
    raise ConfigError(
        [
            f"experiment {exp.path}: config.json {problem}: {what_to_do}, or use "
            "--restart_behavior overwrite to delete it and start afresh"
        ]
    )


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
    """Write `data` as JSON to `path` through a temporary file and a rename; if anything fails
    (a full disk), the temporary file is removed and `path` is as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
