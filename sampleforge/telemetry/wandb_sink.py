"""Weights & Biases run of one experiment (the optional ``wandb`` extra).

Responsibility: open the experiment's W&B run (name = experiment name, files under
``<experiment_dir>/wandb``, the full config as the run config), log the scalars that
`MetricsWriter` writes, keyed by env steps, and finish the run. The run id is kept in
``<experiment_dir>/wandb_run_id.txt``, so a resumed experiment continues the same run and an
overwritten one (its folder deleted) starts a new run.

Env steps are logged as the metric ``env_steps`` and declared the x-axis of every other metric,
not passed as W&B's own step: W&B drops rows whose step is below one it has seen, and a resumed
experiment goes back to its last checkpoint's env steps.

What this module must not do: compute metrics or import wandb before a run is asked for (it is
an optional dependency).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sampleforge.config import Config, ConfigError, config_to_dict

__all__ = ["INSTALL_HINT", "RUN_ID_NAME", "STEP_METRIC", "WandbSink", "wandb_problem"]

RUN_ID_NAME = "wandb_run_id.txt"
STEP_METRIC = "env_steps"
INSTALL_HINT = "pip install 'sampleforge[wandb]'"


def wandb_problem(cfg: Config) -> str | None:
    """Why `cfg` cannot log to W&B on this machine (one line), or None."""
    return _missing_package() if cfg.with_wandb else None


def _missing_package() -> str | None:
    try:
        import wandb  # noqa: F401
    except ImportError:
        return (
            "with_wandb needs the wandb package, which is not installed (install the "
            f"extra: {INSTALL_HINT})"
        )
    return None


class WandbSink:
    """The W&B run of one experiment; `write` logs scalars at an env-step count."""

    def __init__(self, experiment_dir: Path, cfg: Config) -> None:
        """Start (or resume) the run; ConfigError if wandb is missing or refuses to start."""
        problem = _missing_package()
        if problem:
            raise ConfigError([problem])
        import wandb

        self.experiment_dir = Path(experiment_dir)
        self.experiment_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = _run_id(self.experiment_dir / RUN_ID_NAME)
        try:
            self._run: Any = wandb.init(
                project=cfg.wandb_project,
                entity=cfg.wandb_entity,
                group=cfg.wandb_group,
                name=cfg.experiment_name,
                dir=str(self.experiment_dir),
                id=self.run_id,
                resume="allow",
                config=config_to_dict(cfg),
            )
        except wandb.errors.Error as e:  # e.g. no API key: one line, not a traceback
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(
                [
                    f"with_wandb: W&B could not start the run: {first_line} "
                    "(WANDB_MODE=offline logs without an account)"
                ]
            ) from e
        self._run.define_metric(STEP_METRIC)
        self._run.define_metric("*", step_metric=STEP_METRIC)

    def write(self, env_steps: int, values: Mapping[str, float]) -> None:
        """Log `values` as one row at `env_steps`."""
        if self._run is None:
            raise RuntimeError("WandbSink is closed")
        self._run.log({**values, STEP_METRIC: int(env_steps)})

    def close(self) -> None:
        """Finish the run; safe to call more than once. (W&B's service process may finish
        writing the run's files just after this returns; it does before this process exits.)"""
        if self._run is not None:
            run, self._run = self._run, None
            run.finish()


def _run_id(path: Path) -> str:
    """The id saved in `path`, or a new one saved there (before the run starts, so that a
    start that fails half way is resumed rather than duplicated)."""
    if path.is_file():
        saved = path.read_text().strip()
        if saved:
            return saved
    run_id = secrets.token_hex(6)  # W&B ids: letters, digits, '-' and '_'
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(run_id + "\n")
    os.replace(tmp, path)
    return run_id
