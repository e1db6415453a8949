"""The continuous-control family's settings (DDPG, TD3, SAC, CrossQ), declared once beside its
losses (`continuous_control.py`); the run's ``Config`` inherits them, and the replay's
(`replay_settings.py`) with them.

Must not: import torch (the config, and with it `sampleforge --help`, stay light).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from sampleforge.algo.replay_settings import ReplaySettings
from sampleforge.algo.settings import setting

ActorDistribution = Literal["deterministic", "squashed_gaussian"]

_GROUP = "continuous_control"


@dataclass(frozen=True)
class ContinuousSettings(ReplaySettings):
    """Hyper-parameters of the continuous-control algorithms (``--algorithm sac`` and its
    siblings; each algorithm brings its own defaults for them, ``config/algorithm_defaults.py``).
    ``learning_rate`` is the critics' (and SAC's temperature's)."""

    actor_distribution: ActorDistribution = setting(
        "squashed_gaussian",
        "The actor: deterministic (DDPG, TD3: tanh of the mean, Gaussian exploration noise) or "
        "squashed_gaussian (SAC, CrossQ: tanh of a Gaussian sample, which is its exploration).",
        _GROUP,
    )
    actor_learning_rate: float = setting(3e-4, "Learning rate of the actor.", _GROUP)
    num_critics: int = setting(
        2, "Critics in the ensemble; targets and SAC's actor take their minimum (DDPG: 1).", _GROUP
    )
    critic_hidden_sizes: Optional[tuple[int, ...]] = setting(
        None,
        "Hidden layer sizes of each critic, comma separated. Default: mlp_hidden_sizes, as the "
        "actor's.",
        _GROUP,
    )
    policy_delay: int = setting(
        1, "Critic updates per actor (and temperature) update (TD3: 2, CrossQ: 3).", _GROUP
    )
    random_action_steps: int = setting(
        5_000,
        "Env steps of uniformly random actions before the policy acts (the warm-up); like "
        "every step count here, agent steps times the env's frameskip.",
        _GROUP,
    )
    exploration_noise: float = setting(
        0.1,
        "Deterministic actor: std of the Gaussian noise added to its actions while training, "
        "in units of half the action range.",
        _GROUP,
    )
    target_policy_noise: float = setting(
        0.0,
        "TD3's target policy smoothing: std of the noise on the target actor's actions, in "
        "units of half the action range (0: none).",
        _GROUP,
    )
    target_noise_clip: float = setting(
        0.5, "TD3's target policy smoothing: the noise is clipped to +-this.", _GROUP
    )
    entropy_temperature: float = setting(
        0.2, "SAC's temperature alpha (its start when learn_temperature).", _GROUP
    )
    learn_temperature: bool = setting(
        True,
        "SAC: tune alpha so that the policy's entropy tracks target_entropy (Haarnoja et al. "
        "2018b).",
        _GROUP,
    )
    target_entropy: Optional[float] = setting(
        None, "SAC's entropy target when learn_temperature. Default: -(action dimensions).", _GROUP
    )
    target_critics: bool = setting(
        True,
        "Bootstrap from target critics (Polyak-averaged: target_tau). False (CrossQ): the "
        "critics evaluate (s, a) and (s', a') in one batch-normalised pass instead.",
        _GROUP,
    )
    batch_renorm: bool = setting(
        False, "Batch renormalisation in the critics and the actor (CrossQ).", _GROUP
    )
    batch_renorm_warmup: int = setting(
        100_000, "Batch renorm: updates of plain batch norm before its corrections.", _GROUP
    )
    batch_renorm_momentum: float = setting(
        0.01, "Batch renorm: weight of each batch in the running statistics.", _GROUP
    )
