"""The flags that pick a trained policy, shared by `enjoy`, `eval` and `export`.

Responsibility: every config flag (the experiment is found from --train_dir and --experiment,
or the env name, exactly as `train` names it), plus --checkpoint; then the experiment's saved
config.json with the given flags applied on top, and the chosen checkpoint's weights.

Must not: run episodes or write files.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from sampleforge.config import Config
from sampleforge.config.cli_args import add_config_arguments, config_from_args
from sampleforge.envs.registry import EnvSpec, resolve_env
from sampleforge.evaluation.policy_files import (
    CHECKPOINT_CHOICES,
    PolicyFileError,
    find_checkpoint,
    read_experiment_config,
    read_weights_file,
)


@dataclass(frozen=True)
class PolicySource:
    """A trained policy chosen on the command line."""

    cfg: Config
    env_spec: EnvSpec
    state_dict: dict[str, torch.Tensor]
    experiment_dir: Path
    checkpoint: Path


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """--checkpoint and every config flag."""
    parser.add_argument(
        "--checkpoint",
        default="latest",
        metavar="{" + ",".join(CHECKPOINT_CHOICES) + ",PATH}",
        help="Which weights: the latest checkpoint, best (best training mean "
        "return), best_eval (best evaluation mean return), or a checkpoint "
        "file. (default: latest)",
    )
    add_config_arguments(
        parser,
        heading="training settings",
        note="Read from the experiment's config.json; a flag overrides.",
    )


def policy_from_args(args: argparse.Namespace) -> PolicySource:
    """The experiment's config (flags applied on top) and the chosen checkpoint's weights.

    Raises ConfigError, PolicyFileError or UnknownEnvError with a one-line message.
    """
    named = config_from_args(args)  # only to find the folder, as `train` names it
    experiment_dir = Path(named.train_dir) / named.experiment_name
    cfg = config_from_args(args, base=read_experiment_config(experiment_dir))
    checkpoint = find_checkpoint(experiment_dir, args.checkpoint)
    return PolicySource(
        cfg=cfg,
        env_spec=resolve_env(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop),
        state_dict=read_weights_file(checkpoint),
        experiment_dir=experiment_dir,
        checkpoint=checkpoint,
    )


def local_policy_from_args(args: argparse.Namespace):
    """(source, LocalPolicy with its weights, the env's metadata) for `enjoy` and `export`.

    Raises the `input_errors()` with a one-line message.
    """
    from sampleforge.envs.registry import make_env
    from sampleforge.evaluation import LocalPolicy, WeightsDoNotFit

    source = policy_from_args(args)
    probe = make_env(source.env_spec)
    try:
        policy = LocalPolicy.build(
            source.cfg, probe.observation_space, probe.action_space, state_dict=source.state_dict
        )
        return source, policy, dict(probe.metadata)
    except WeightsDoNotFit as err:
        raise PolicyFileError(
            f"the weights of {source.checkpoint} {err}: is it from another experiment, or "
            "does a flag change the model?"
        ) from None
    finally:
        probe.close()


def input_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad input (exit code 2), not a failure."""
    from sampleforge.config import ConfigError
    from sampleforge.envs.registry import UnknownEnvError
    from sampleforge.evaluation.policy_files import PolicyFileError
    from sampleforge.spaces import UnsupportedSpaceError

    return ConfigError, PolicyFileError, UnknownEnvError, UnsupportedSpaceError
