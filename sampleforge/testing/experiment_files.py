"""An experiment folder as the CLI's commands name it, and its policy as they build it, for
tests of `enjoy`, `eval` and `export` on trained experiments.

Must not: be used outside tests.
"""

from __future__ import annotations

from pathlib import Path

from sampleforge.envs import env_info
from sampleforge.evaluation import (
    LocalPolicy,
    find_checkpoint,
    read_experiment_config,
    read_weights_file,
)


def experiment_flags(experiment: Path) -> list[str]:
    """The `--train_dir` and `--experiment` flags that name the folder `experiment`."""
    return ["--train_dir", str(experiment.parent), "--experiment", experiment.name]


def experiment_policy(experiment: Path, env: str, checkpoint: str = "latest") -> LocalPolicy:
    """The policy of `experiment` at `checkpoint`, with its weights, for `env`'s spaces."""
    info = env_info(env)
    return LocalPolicy.build(
        read_experiment_config(experiment),
        info.observation_space,
        info.action_space,
        state_dict=read_weights_file(find_checkpoint(experiment, checkpoint)),
    )
