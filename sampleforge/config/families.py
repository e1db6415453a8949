"""Environment families and the settings each one needs to learn well.

`sampleforge train --env atari_breakout` must learn Breakout without the user knowing which of
sixty settings matter. The env name decides the family; the family's settings fill in what the
user did not give (a preset and explicit flags both win over them), and `config.json` records
which values came from the family.

Families (the measurements behind each setting: docs/benchmarks.md):

- ``atari``: the ``atari_*`` games (DeepMind preprocessing, clipped rewards). The PPO recipe of
  Sample Factory's Atari example and CleanRL's ``ppo_atari`` (GAE, 128-step rollouts,
  minibatches of 256, clip 0.1, the DQN Nature network), with fewer epochs at a higher lr for
  wall time on a CPU learner and Sample Factory's initialisation with CleanRL's policy head.
- ``doom``: the ``doom_*`` scenarios (pixels, large shaped rewards): the paper's V-trace, ELU
  and GRU core, sized for a CPU learner; the discount follows the scenario's frameskip.
- ``continuous``: Box actions, vector observations: MuJoCo and the continuous classic-control
  and Box2D tasks. The usual PPO recipe for them (`sampleforge.envs.mujoco.mujoco_preset`).
- ``vector``: discrete actions, vector observations: classic control and Box2D. PPO with GAE,
  4 epochs, lr 1e-3, entropy 0.01, clip 0.2 on the defaults' samplers.

Every family normalises returns (`normalize_returns`), so no task needs a hand-picked
`reward_scale`. Envs outside these families (third-party ``module:EnvId`` names, EnvPool,
PettingZoo, the built-in duel) get the plain defaults.

Must not: build environments beyond a one-off Gymnasium probe of a classic-control or Box2D
id's spaces (cached), or import torch at import time: the env modules it reads settings from
(`envs.mujoco`, `envs.doom.scenarios`, which bring torch) are imported only when a family needs
them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sampleforge.config.algorithm_defaults import continuous_settings, value_settings
from sampleforge.config.algorithms import algorithm_family
from sampleforge.config.schema import available_cores

FAMILY_NAMES = ("atari", "doom", "continuous", "vector")


def env_family(env: str) -> str | None:
    """The family of env name `env` (one of FAMILY_NAMES), or None for other envs."""
    if env.startswith("atari_"):
        return "atari"
    if env.startswith("doom_"):
        return "doom"
    if ":" in env:  # module:EnvId, envpool:..., pettingzoo:...: not known before import
        return None
    return _gymnasium_family(env)


def family_settings(
    family: str | None, env: str | None = None, algorithm: str = "appo"
) -> dict[str, Any]:
    """The settings of `family` (one of FAMILY_NAMES) for `algorithm`, and, given the env's
    name, those that depend on the env within its family (a Doom env's discount, from its
    frameskip). A value-based algorithm gets its own recipe (`config/algorithm_defaults.py`)."""
    if algorithm_family(algorithm) == "continuous_control":
        settings = continuous_settings(algorithm, family)
    elif algorithm_family(algorithm) != "actor_critic":
        settings = value_settings(algorithm, family)
    elif family is None:
        return {}
    elif family == "continuous":
        from sampleforge.envs.mujoco import mujoco_preset

        return {**mujoco_preset(), **_RETURN_NORMALISATION}
    else:
        settings = {**_FAMILIES[family], **_RETURN_NORMALISATION}
        if family == "doom" and env is not None:
            settings.update(_doom_discount(env))
    if family == "atari":  # a conv network on the CPU, whichever algorithm trains it
        settings["num_workers"] = conv_on_cpu_workers()
    return settings


def _doom_discount(env: str) -> dict[str, Any]:
    """{"gamma": the discount paired with `env`'s frameskip}, or {} for a frameskip without one
    or a name not registered (building the env reports that)."""
    from sampleforge.envs.doom.scenarios import GAMMA_AT_FRAMESKIP
    from sampleforge.envs.registry import UnknownEnvError, resolve_env

    try:
        frameskip = resolve_env(env).frameskip
    except UnknownEnvError:
        return {}
    gamma = GAMMA_AT_FRAMESKIP.get(frameskip)
    return {} if gamma is None else {"gamma": gamma}


def conv_on_cpu_workers() -> int:
    """Rollout workers for a conv policy trained on the CPU: half the cores, at least one.

    Per sample on atari_breakout the learner costs about as much as env step and inference
    together (830 vs 500 + 330 us on one core, one SGD pass), so half the machine goes to the
    learner; more rollout processes only contend for it.
    """
    return max(1, available_cores() // 2)


# Value targets in units of their running statistics instead of a per-task reward_scale.
_RETURN_NORMALISATION = {"normalize_returns": True, "reward_scale": 1.0}

_FAMILIES: dict[str, dict[str, Any]] = {
    # Why each setting (Breakout and Pong, seeds 1-3, 2 cores; docs/benchmarks.md, Atari):
    # - 16 envs in two splits of 8 x 128 steps: each split is one 1,024-sample dataset, so
    #   back-pressure holds sampling to what the learner needs.
    # - 1 epoch at lr 5e-4, not the recipe's 4 at 2.5e-4: the same frames to a score in a third
    #   of the wall time (the learner no longer the bottleneck); lr 1e-3 collapses Pong.
    # - 2 epochs over the first 1M frames: Breakout's 10 at 0.44M-0.49M frames instead of
    #   0.63M-0.72M, 20 in the same minutes.
    # - unit_uniform: Sample Factory's gain 1 learns Breakout sooner, CleanRL's 0.01 policy head
    #   keeps the first policy uniform, which Pong needs; normalize_pixels and
    #   normalize_returns: each reaches Breakout's first scores sooner.
    "atari": {
        "rollout": 128,
        "batch_size": 256,
        "num_batches_per_epoch": 4,
        "num_epochs": 1,
        "early_num_epochs": 2,
        "early_env_steps": 1_000_000,
        "learning_rate": 5e-4,
        "lr_schedule": "linear",
        "adam_eps": 1e-5,
        "with_vtrace": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "ppo_clip_ratio": 0.1,
        "value_loss_coeff": 0.5,
        "entropy_coeff": 0.01,
        "max_grad_norm": 0.5,
        "activation": "relu",
        "encoder": "conv_nature",
        "normalize_pixels": True,
        "init_scheme": "unit_uniform",
        "num_envs_per_worker": 16,
        "learner_torch_threads": "auto",
    },
    # VizDoom (docs/benchmarks.md, VizDoom): ELU and a GRU core as in the paper (256 rather
    # than 512, and 4 minibatches of 256 rather than one step of 2,048: the CPU learner is the
    # bottleneck). The dual clip bounds the huge ratio of a stale sample on a negative advantage,
    # which once collapsed defend_the_center's policy; entropy 0.01 rather than 0.005, which left
    # one seed of three stuck; the lr decays to 0 so the late frames hold their score. The
    # symmetric KL to uniform (Sample Factory's) did no better than the entropy bonus.
    "doom": {
        "activation": "elu",
        "rnn": "gru",
        "rnn_size": 256,
        "learning_rate": 2.5e-4,
        "lr_schedule": "linear",
        "batch_size": 256,
        "num_batches_per_epoch": 4,
        "num_epochs": 1,
        "entropy_coeff": 0.01,
        "ppo_dual_clip": 3.0,
        "num_envs_per_worker": 8,
        "learner_torch_threads": "auto",
    },
    # Classic control and Box2D with discrete actions (docs/benchmarks.md, vector family): the
    # defaults' samplers with PPO's usual GAE, 4 epochs, entropy 0.01, clip 0.2 and gradient
    # norm 0.5 solve CartPole-v1, Acrobot-v1 and LunarLander-v3; the CartPole-tuned plain
    # defaults do not solve LunarLander.
    "vector": {
        "with_vtrace": False,
        "gae_lambda": 0.95,
        "num_epochs": 4,
        "learning_rate": 1e-3,
        "entropy_coeff": 0.01,
        "ppo_clip_ratio": 0.2,
        "max_grad_norm": 0.5,
    },
}


@lru_cache(maxsize=64)
def _gymnasium_family(env_id: str) -> str | None:
    """continuous or vector for Gymnasium's MuJoCo, classic-control and Box2D ids."""
    import gymnasium as gym

    spec = gym.envs.registry.get(env_id)
    if spec is None:
        return None
    entry_point = str(spec.entry_point)
    if "mujoco" in entry_point:
        return "continuous"
    if "classic_control" not in entry_point and "box2d" not in entry_point:
        return None
    try:
        env = gym.make(env_id)
    except Exception:  # noqa: BLE001 - e.g. Box2D not installed: the env itself will say so
        return None
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
        return None  # pixels (CarRacing)
    return "continuous" if isinstance(act, gym.spaces.Box) else "vector"
