"""The value-based family's settings (DQN through Rainbow, QR-DQN, IQN, FQF, M-DQN, PQN),
declared once beside its losses (`q_learning.py`); the run's ``Config`` inherits them.

Must not: import torch (the config, and with it `sampleforge --help`, stay light).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sampleforge.algo.replay_settings import ReplaySettings
from sampleforge.algo.settings import setting

QHeadName = Literal["scalar", "categorical", "quantile", "implicit_quantile", "fqf"]
ExplorationName = Literal["linear", "ladder"]

_GROUP = "value_based"


@dataclass(frozen=True)
class ValueSettings(ReplaySettings):
    """Hyper-parameters of the value-based algorithms (``--algorithm dqn`` and its siblings;
    each algorithm brings its own defaults for them, ``config/families.py``)."""

    q_head: QHeadName = setting(
        "scalar",
        "What the Q-network estimates per action: scalar (DQN), categorical (C51, Rainbow), "
        "quantile (QR-DQN), implicit_quantile (IQN) or fqf (FQF).",
        _GROUP,
    )
    double_q: bool = setting(
        True, "Double DQN: the online network picks the bootstrap action.", _GROUP
    )
    dueling: bool = setting(False, "Dueling heads: V + A - mean(A).", _GROUP)
    noisy: bool = setting(
        False, "Noisy linear layers in the head (explore by noise, not epsilon).", _GROUP
    )
    layer_norm: bool = setting(
        False, "LayerNorm before every hidden activation of the Q-network (PQN).", _GROUP
    )
    huber_loss: bool = setting(True, "Scalar head: Huber TD loss (else squared error).", _GROUP)
    exploration: ExplorationName = setting(
        "linear",
        "Epsilon-greedy per env: linear (epsilon_start to epsilon_end over "
        "exploration_env_steps, every env alike) or ladder (Ape-X: env i of N keeps "
        "epsilon_ladder_base^(1 + epsilon_ladder_alpha i / (N - 1))).",
        _GROUP,
    )
    epsilon_start: float = setting(1.0, "Linear exploration: epsilon at the start.", _GROUP)
    epsilon_end: float = setting(0.05, "Linear exploration: epsilon at the end.", _GROUP)
    exploration_env_steps: int = setting(
        10_000, "Linear exploration: env steps over which epsilon anneals.", _GROUP
    )
    epsilon_ladder_base: float = setting(0.4, "Ladder exploration: epsilon.", _GROUP)
    epsilon_ladder_alpha: float = setting(7.0, "Ladder exploration: alpha.", _GROUP)
    num_atoms: int = setting(51, "Categorical head: atoms of the support.", _GROUP)
    v_min: float = setting(-10.0, "Categorical head: the support's lowest value.", _GROUP)
    v_max: float = setting(10.0, "Categorical head: the support's highest value.", _GROUP)
    num_quantiles: int = setting(
        200, "Quantile head: N quantiles; implicit_quantile/fqf: N = N' samples.", _GROUP
    )
    num_fractions: int = setting(32, "FQF: fractions proposed per state.", _GROUP)
    fraction_lr: float = setting(2.5e-9, "FQF: learning rate of the fraction proposal.", _GROUP)
    munchausen: bool = setting(
        False, "Munchausen DQN: the scaled log-policy bonus and soft bootstrap.", _GROUP
    )
    munchausen_alpha: float = setting(0.9, "Munchausen: alpha.", _GROUP)
    munchausen_tau: float = setting(0.03, "Munchausen: entropy temperature tau.", _GROUP)
    munchausen_clip: float = setting(-1.0, "Munchausen: the log-policy clip l0 (< 0).", _GROUP)
    q_lambda: float = setting(0.65, "PQN: lambda of the Q(lambda) targets.", _GROUP)


# ---------------------------------------------------------------------------- the TD losses
#
# Every loss below reads as its paper does:
#
#     a*     = argmax_a Q_online(s', a)   (Double DQN)   or   argmax_a Q_target(s', a)
#     target = R + d * Z_target(s', a*)   (a scalar, a projected distribution, or quantiles)
#     loss   = mean_b w_b * l_b(Z_online(s_b, a_b), target_b)
#
# where R is the n-step discounted reward sum and d = gamma^m (0 after a termination), both
# computed by the replay (``value_targets.n_step_returns``), and w the importance weights of
# prioritized replay (ones for uniform sampling). Targets are constants: the target-network
# inputs, and ``next_online_q`` (used only for its argmax), never carry gradient.
