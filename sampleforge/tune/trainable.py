"""The Ray Tune trainable: one sampleforge run per trial, trained through the Python API.

A trial's config is `Config` settings (`algorithm`, `env` and any other field, searched or
fixed) plus, under TRIAL_KEY, the trainable's own settings (`TrialSettings`). Each Tune
iteration is one `Algorithm.train(env_steps_per_iteration)` call on processes that stay up,
paused, between iterations; the result reports the mean return of the last 100 episodes
(`mean_return`, the metric the searches rank by) and the run's env steps.

Checkpoints (class API: `save_checkpoint`/`load_checkpoint`) go through Ray Tune's checkpoint
API, and a Ray checkpoint is a copy of the run's newest sampleforge checkpoints (`state.py`).
Restoring one -- a failed or preempted trial restarted by Ray, or PBT's exploit, which restores
the better member's checkpoint into the worse one with mutated settings -- closes the trial's
current run and starts a new one in a new experiment folder that holds those checkpoints. Its
learners resume the copied weights, optimizer state, counters and policy version, as
`sampleforge train` resumes, under the trial's (possibly mutated) config, and
`set_hyperparameters` then puts the config's learning rate and betas into the restored
optimizer. This costs a restart of the trial's processes at each exploit (seconds), and in
exchange copies everything a learner has, not only what the API's `set_parameters` moves
(weights).

Every result also carries checksums of the weights (`weights_sha256`, of `get_parameters`) and
of the newest checkpoint's optimizer state (`optimizer_sha256`, `optimizer_steps`); the first
result after a restore names the trial whose state it took (`restored_from`) and the checksums
of what it restored, so a copy can be checked from the results alone.

Must not: change a run's settings other than through the Python API, or write into another
trial's folders.
"""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sampleforge.api import Algorithm
from sampleforge.api.env_argument import env_name
from sampleforge.config import Config, make_config
from sampleforge.telemetry import RunSummary
from sampleforge.tune import RAY_MISSING, RayMissingError
from sampleforge.tune.resources import trial_resources
from sampleforge.tune.state import (
    STATE_FILE,
    export_state,
    import_state,
    latest_states,
    optimizer_checksum,
    optimizer_steps,
    weights_checksum,
)

try:
    from ray import tune
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.result import DONE
except ImportError:
    raise RayMissingError(RAY_MISSING) from None

TRIAL_KEY = "sampleforge_tune"
METRIC = "mean_return"  # mean return of the last 100 episodes; what every search ranks by
TIME_ATTR = "env_steps"  # the run's env steps, resumed ones included
# Settings a trial sets itself: each run has its own folder, and a restored one must resume.
OWN_SETTINGS = ("experiment", "train_dir", "restart_behavior")


@dataclasses.dataclass(frozen=True)
class TrialSettings:
    """The trainable's own settings (the TRIAL_KEY entry of a trial's config)."""

    env_steps_per_iteration: int
    """Env steps per Tune iteration (one `train` call): the reporting and checkpoint grain."""
    trials_dir: str | None = None
    """Absolute folder for the trials' experiment folders; default: `<trial dir>/sampleforge`."""
    cpus: float | None = None
    """CPUs a trial asks Ray for; default: one per process of its run (`resources.py`)."""
    gpus: float | None = None
    """GPUs a trial asks Ray for; default: 1 on `cuda`, else 0."""

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> "TrialSettings":
        return cls(**config[TRIAL_KEY])


def run_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `Config` settings of a trial's config (its TRIAL_KEY entry left out)."""
    return {k: v for k, v in config.items() if k != TRIAL_KEY}


def trial_config(config: Mapping[str, Any]) -> Config:
    """The validated `Config` a trial's run will have (ConfigError if a setting is bad)."""
    settings = run_settings(config)
    settings["env"] = env_name(settings["env"])
    return make_config(**{k: v for k, v in settings.items() if k not in OWN_SETTINGS})


def algorithm_class(name: str) -> type[Algorithm]:
    """The Python API class of `--algorithm` `name` (every class that declares one)."""
    classes: dict[str, type[Algorithm]] = {}
    pending: list[type[Algorithm]] = [Algorithm]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "algorithm" in vars(cls):
            classes[cls.algorithm] = cls
    if name not in classes:
        raise ValueError(f"algorithm {name!r}: none of {', '.join(sorted(classes))}")
    return classes[name]


class SampleforgeTrainable(tune.Trainable):
    """One sampleforge run per trial; see the module docstring."""

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> PlacementGroupFactory:
        """One bundle (one node: the run's processes share memory) of `resources.py`'s size."""
        settings = TrialSettings.of(config)
        bundle = trial_resources(trial_config(config), cpus=settings.cpus, gpus=settings.gpus)
        return PlacementGroupFactory([bundle])

    def setup(self, config: dict[str, Any]) -> None:
        self._algorithm: Algorithm | None = None
        self._use(config)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """A reused actor takes a new trial or PBT's new config: the next iteration starts a
        new run (from the checkpoint Ray restores next, if any)."""
        self._close()
        self._use(new_config)
        return True

    def _use(self, config: Mapping[str, Any]) -> None:
        self._settings = TrialSettings.of(config)
        self._run_settings = run_settings(config)
        self._restore_folder: Path | None = None  # laid out by load_checkpoint, not yet run
        self._restore_record: dict[str, Any] | None = None  # reported with the next result

    # --- training -------------------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        algorithm = self._algorithm or self._start()
        summary = algorithm.train(self._settings.env_steps_per_iteration)
        return self._result(algorithm, summary)

    def _start(self) -> Algorithm:
        """A new run: in the folder a restore laid out, else in a new one."""
        folder = self._restore_folder or self._trials_dir() / self._new_experiment_name()
        settings = dict(self._run_settings)
        cls = algorithm_class(settings.pop("algorithm"))
        algorithm = cls(
            settings.pop("env"),
            **{
                **settings,
                "experiment": folder.name,
                "train_dir": str(folder.parent),
                "restart_behavior": "resume",
            },
        )
        self._algorithm = algorithm
        if self._restore_record is not None:
            # The restored optimizer holds the saving member's betas and rates; the learner
            # takes this trial's (its config's) from the next dataset on.
            algorithm.set_hyperparameters(algorithm.hyperparameters)
            self._restore_record["restored_weights_sha256"] = weights_checksum(
                algorithm.get_parameters()
            )
        self._restore_folder = None
        return algorithm

    def _result(self, algorithm: Algorithm, summary: RunSummary) -> dict[str, Any]:
        states = latest_states(algorithm.experiment_dir, algorithm.cfg.num_policies)
        restored = self._restore_record or {}
        self._restore_record = None
        result = {
            TIME_ATTR: summary.env_steps,
            # No finished episode yet ranks last.
            METRIC: _number(summary.mean_return_last_100, -math.inf),
            "best_mean_return": _number(summary.best_mean_return, -math.inf),
            "fps": summary.mean_fps,
            "policy_lag": _number(summary.mean_policy_lag, math.nan),
            "experiment_dir": str(algorithm.experiment_dir),
            "weights_sha256": weights_checksum(algorithm.get_parameters()),
            "optimizer_sha256": optimizer_checksum(states),
            "optimizer_steps": optimizer_steps(states),
            # Every result has every key (Ray's CSV keeps the first result's columns).
            "restored_from": restored.get("trial_id", ""),
            "restored_env_steps": restored.get("env_steps", -1),
            "restored_weights_sha256": restored.get("restored_weights_sha256", ""),
            "restored_optimizer_sha256": restored.get("restored_optimizer_sha256", ""),
        }
        if summary.stopped_because == "stop_at_mean_return":
            result[DONE] = True
        return result

    # --- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Copy the run's newest checkpoints into `checkpoint_dir` (`state.py`)."""
        info: dict[str, Any] = {"trial_id": self.trial_id}
        if self._algorithm is not None:
            algorithm = self._algorithm
            info["env_steps"] = algorithm.env_steps
            info["weights_sha256"] = weights_checksum(algorithm.get_parameters())
            export_state(
                algorithm.experiment_dir, algorithm.cfg.num_policies, Path(checkpoint_dir), info
            )
        elif self._restore_folder is not None:  # restored, not run since: pass it on
            info.update(self._restore_record or {})
            num_policies = len(list((self._restore_folder / "checkpoints").iterdir()))
            export_state(self._restore_folder, num_policies, Path(checkpoint_dir), info)
        else:  # nothing trained yet: restoring this starts afresh
            (Path(checkpoint_dir) / STATE_FILE).write_text(json.dumps({**info, "empty": True}))

    def load_checkpoint(self, checkpoint: dict[Any, Any] | str | None) -> None:
        """Lay the checkpoint (the folder save_checkpoint filled) into a new experiment
        folder; the next iteration's run resumes it (weights, optimizer state, counters) under
        this trial's config."""
        self._close()
        if not isinstance(checkpoint, str):
            raise TypeError(f"expected a checkpoint folder, got {type(checkpoint).__name__}")
        source = Path(checkpoint)
        if json.loads((source / STATE_FILE).read_text()).get("empty"):
            self._restore_folder, self._restore_record = None, None
            return
        folder = self._trials_dir() / self._new_experiment_name()
        self._restore_record = import_state(source, folder)
        self._restore_folder = folder

    # --- lifecycle ------------------------------------------------------------------------------
    def cleanup(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._algorithm is not None:
            self._algorithm.close()
            self._algorithm = None

    def _trials_dir(self) -> Path:
        if self._settings.trials_dir is not None:
            return Path(self._settings.trials_dir)
        return Path(self.logdir).absolute() / "sampleforge"

    def _new_experiment_name(self) -> str:
        """Unique, so that a restarted trial never resumes a folder it did not restore."""
        return f"{self.trial_id}_{uuid.uuid4().hex[:8]}"


def _number(value: float | None, missing: float) -> float:
    return missing if value is None else float(value)
