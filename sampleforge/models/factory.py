"""Builds a policy's network from the config and the env's spaces, the same way everywhere.

The learner, every inference worker and the Python API call this, so their models always have
identical parameter layouts (shared weights are copied as one flat vector). The ``encoder``
setting names any encoder of ``models/registry.py``: a user's own ``nn.Module`` trains by name.
"""

from __future__ import annotations

from typing import Callable, cast

import gymnasium as gym
import numpy as np
import torch

from sampleforge import spaces
from sampleforge.config import Config, ConfigError
from sampleforge.config.algorithms import algorithm_family, family_algorithms
from sampleforge.models.actor_critic import ActorCritic
from sampleforge.models.continuous_actor import BatchRenormSettings, ContinuousActor, vector_size
from sampleforge.models.continuous_policy import (
    ContinuousExploration,
    ContinuousPolicy,
    action_bounds,
)
from sampleforge.models.normalizer import RunningMeanStd
from sampleforge.models.policy import Policy
from sampleforge.models.q_network import make_q_network
from sampleforge.models.q_policy import Exploration, QPolicy
from sampleforge.models.registry import check_encoder_sendable

# Settings that change the network's parameter layout: a checkpoint is only valid for these.
MODEL_SETTINGS = (
    "encoder",
    "mlp_hidden_sizes",
    "activation",
    "rnn",
    "rnn_size",
    "shared_weights",
    "normalize_obs",
    "normalize_returns",
    "normalize_pixels",
    "q_head",
    "dueling",
    "noisy",
    "layer_norm",
    "num_atoms",
    "num_quantiles",
    "num_fractions",
    "actor_distribution",
    "batch_renorm",
)


def make_actor_critic(
    cfg: Config, observation_space: gym.Space, action_space: gym.Space
) -> ActorCritic:
    """The actor-critic network `cfg` describes, for these spaces."""
    return ActorCritic(
        observation_space,
        action_space,
        encoder=cfg.encoder,
        mlp_hidden_sizes=tuple(cfg.mlp_hidden_sizes),
        activation=cfg.activation,
        rnn_type=cfg.rnn,
        rnn_size=cfg.rnn_size,
        shared_weights=cfg.shared_weights,
        normalize_obs=cfg.normalize_obs,
        normalize_returns=cfg.normalize_returns,
        normalize_pixels=cfg.normalize_pixels,
        init_scheme=cfg.init_scheme,
    )


def make_q_policy(cfg: Config, observation_space: gym.Space, action_space: gym.Space) -> QPolicy:
    """The Q-network `cfg` describes (its head and extensions: `ValueSettings`), acting with
    `cfg`'s exploration."""
    network = make_q_network(
        observation_space,
        action_space,
        head=cfg.q_head,
        dueling=cfg.dueling,
        noisy=cfg.noisy,
        layer_norm=cfg.layer_norm,
        encoder=cfg.encoder,
        mlp_hidden_sizes=tuple(cfg.mlp_hidden_sizes),
        activation=cfg.activation,
        num_atoms=cfg.num_atoms,
        v_min=cfg.v_min,
        v_max=cfg.v_max,
        num_quantiles=cfg.num_quantiles,
        num_fractions=cfg.num_fractions,
        normalize_pixels=cfg.normalize_pixels,
    )
    exploration = Exploration(
        kind="noisy" if cfg.noisy else cfg.exploration,
        epsilon_start=cfg.epsilon_start,
        epsilon_end=cfg.epsilon_end,
        anneal_env_steps=cfg.exploration_env_steps,
        ladder_base=cfg.epsilon_ladder_base,
        ladder_alpha=cfg.epsilon_ladder_alpha,
        num_envs=cfg.num_workers * cfg.num_envs_per_worker,
    )
    return QPolicy(network, exploration)


def batch_renorm_settings(cfg: Config) -> BatchRenormSettings | None:
    """How `cfg`'s continuous-control networks renormalise their batches (None: they don't)."""
    if not cfg.batch_renorm:
        return None
    return BatchRenormSettings(cfg.batch_renorm_warmup, cfg.batch_renorm_momentum)


def make_continuous_policy(
    cfg: Config, observation_space: gym.Space, action_space: gym.Space
) -> ContinuousPolicy:
    """The actor `cfg` describes (`ContinuousSettings`), acting in `action_space`'s bounds with
    `cfg`'s exploration. ValueError (one line) for actions that are not a bounded Box or
    observations that are not float vectors."""
    action_bounds(action_space)  # before anything is built: the clearer message first
    obs_specs = spaces.observation_specs(observation_space)
    features = vector_size(obs_specs)
    actor = ContinuousActor(
        features,
        int(np.prod(cast(tuple[int, ...], action_space.shape))),
        distribution=cfg.actor_distribution,
        hidden_sizes=tuple(cfg.mlp_hidden_sizes),
        activation=cfg.activation,
        batch_renorm=batch_renorm_settings(cfg),
    )
    exploration = ContinuousExploration(
        random_action_steps=cfg.random_action_steps, noise_std=cfg.exploration_noise
    )
    normalizer = RunningMeanStd((features,)) if cfg.normalize_obs else None
    return ContinuousPolicy(actor, obs_specs, action_space, exploration, normalizer)


# family (config/algorithms.py) -> the network its policies act and learn with
MODEL_FAMILIES: dict[str, Callable[[Config, gym.Space, gym.Space], Policy]] = {
    "actor_critic": make_actor_critic,
    "value_based": make_q_policy,
    "pqn": make_q_policy,
    "continuous_control": make_continuous_policy,
}


def make_policy_model(cfg: Config, observation_space: gym.Space, action_space: gym.Space) -> Policy:
    """The network of `cfg.algorithm`'s family, for these spaces: what inference, evaluation,
    export and the learner build (the one place that asks which family runs)."""
    return MODEL_FAMILIES[algorithm_family(cfg.algorithm)](cfg, observation_space, action_space)


def check_model_fits_env(cfg: Config, env) -> None:
    """Build the model once before any process starts: an unknown encoder, or a model setting
    that cannot work with the env's spaces (e.g. a conv encoder on vector observations), is a
    config error; so is an algorithm whose network cannot act in the env (a Discrete-only
    value-based algorithm on Box actions: the message names the algorithms that fit), a
    registered encoder that worker processes could not receive, or the symmetric_kl
    exploration loss on Box actions."""
    try:
        make_policy_model(cfg, env.observation_space, env.action_space)
    except ConfigError:
        raise  # an unknown encoder: its own one-line message
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, RuntimeError) and "allocate" not in str(e):
            raise
        raise ConfigError(
            [
                f"the model these settings describe does not fit in memory ({_one_line(e)}): "
                f"check its sizes (mlp_hidden_sizes {list(cfg.mlp_hidden_sizes)}, rnn_size "
                f"{cfg.rnn_size})"
            ]
        ) from None
    except (ValueError, TypeError) as e:
        fit = _algorithms_that_fit(cfg, env)
        if fit:  # the settings suit the env; this algorithm's network does not
            raise ConfigError(
                [
                    f"algorithm {cfg.algorithm!r} cannot act in env {cfg.env!r}: "
                    f"{_one_line(e)}; algorithms that fit it: {', '.join(fit)}"
                ]
            ) from None
        raise ConfigError(
            [
                f"the model settings do not fit env {cfg.env!r} "
                f"(observations {_one_line(env.observation_space)}): {_one_line(e)}"
            ]
        ) from None
    if cfg.exploration_loss == "symmetric_kl" and isinstance(env.action_space, gym.spaces.Box):
        raise ConfigError(
            [
                f"exploration_loss 'symmetric_kl' compares the policy with the uniform one, "
                f"which Box actions do not have (env {cfg.env!r}); use exploration_loss entropy"
            ]
        )
    problem = None if cfg.serial_mode else check_encoder_sendable(cfg.encoder)
    if problem:
        raise ConfigError([problem])


def _algorithms_that_fit(cfg: Config, env) -> list[str]:
    """The algorithms whose network builds for the env's spaces with `cfg`'s other settings
    (one build per family: a family shares its network)."""
    fit: list[str] = []
    for family in MODEL_FAMILIES:
        algorithms = family_algorithms(family)  # type: ignore[arg-type]  # a FamilyName key
        try:
            make_policy_model(
                cfg.replace(algorithm=algorithms[0]), env.observation_space, env.action_space
            )
        except (ValueError, TypeError):
            continue
        fit.extend(algorithms)
    return fit


def _one_line(item: object) -> str:
    # A Box with per-element bounds prints its arrays over several lines.
    return " ".join(str(item).split())


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """The torch device of `--device` (auto: CUDA when torch sees one). `local_rank` (a
    data-parallel rank's index on its machine) picks the GPU of a plain cuda or auto."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(name[5:]) if name.startswith("cuda:") else (local_rank or 0)
        if index >= count:
            raise ConfigError(
                [
                    f"--device {name} was asked for (GPU {index}), but torch sees "
                    f"{count} CUDA device(s) (use --device cpu or auto)"
                ]
            )
        return torch.device("cuda", index)
    return torch.device(name)
