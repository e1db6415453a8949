"""The actor-critic family's settings (APPO, IMPALA, A3C), declared once beside its loss
(`actor_critic_loss.py`); the run's ``Config`` inherits them.

Must not: import torch (the config, and with it `sampleforge --help`, stay light).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, get_args

from sampleforge.algo.settings import ReturnSettings, setting

ALGORITHMS = ("appo", "impala", "a3c")
AdvantageScale = Literal["minibatch", "return_std"]
ExplorationLoss = Literal["entropy", "symmetric_kl"]
ADVANTAGE_SCALES: tuple[str, ...] = get_args(AdvantageScale)
EXPLORATION_LOSSES: tuple[str, ...] = get_args(ExplorationLoss)


_GROUP = "actor_critic"


@dataclass(frozen=True)
class ActorCriticSettings(ReturnSettings):
    """Hyper-parameters of the actor-critic loss (``--algorithm appo``, ``impala``, ``a3c``).

    The run's ``Config`` inherits them: these declarations are the CLI flags and their
    ``--help``. Nothing is checked here (a config reports bad values as one-line
    ``ConfigError``s, ``config/validation.py``); the loss checks what it relies on
    (:func:`check_settings`).
    """

    gae_lambda: float = setting(
        0.95, "GAE lambda (used when V-trace is off, and by a3c; 1: n-step returns).", _GROUP
    )
    with_vtrace: bool = setting(
        True,
        "appo: V-trace targets and advantages (else GAE on the behaviour values); impala "
        "always uses V-trace, a3c never.",
        _GROUP,
    )
    vtrace_rho_bar: float = setting(
        1.0, "V-trace rho clipping threshold (also the policy gradient's rho clip).", _GROUP
    )
    vtrace_c_bar: float = setting(1.0, "V-trace c clipping threshold.", _GROUP)
    ppo_clip_ratio: float = setting(
        0.1, "PPO clipping: ratios outside [1/(1+x), 1+x] get no gradient.", _GROUP
    )
    ppo_dual_clip: Optional[float] = setting(
        None,
        "Dual-clip PPO: where the advantage A < 0 the surrogate is bounded below at x*A "
        "(x > 1), so a stale sample with a huge ratio cannot dominate an update; None disables.",
        _GROUP,
    )
    value_clip: Optional[float] = setting(
        None,
        "Clip value updates around the behaviour values (PPO-style); None disables.",
        _GROUP,
    )
    value_loss_coeff: float = setting(0.5, "Critic loss coefficient.", _GROUP)
    entropy_coeff: float = setting(
        0.003, "Weight of the exploration term (see exploration_loss).", _GROUP
    )
    exploration_loss: ExplorationLoss = setting(
        "entropy",
        "What entropy_coeff weighs: entropy, the bonus -H(pi); symmetric_kl, the symmetric KL "
        "of pi to the uniform policy (Sample Factory's Doom setting; discrete actions only), "
        "which pulls a policy that turns deterministic back where the entropy's pull vanishes.",
        _GROUP,
    )
    normalize_advantages: bool = setting(
        True, "Normalise advantages (see advantage_scale).", _GROUP
    )
    advantage_scale: AdvantageScale = setting(
        "minibatch",
        "How normalize_advantages scales them: minibatch, (A - mean) / std over each "
        "minibatch (the PPO recipe); return_std, A / the running std of the returns "
        "(PopArt's policy gradient; needs normalize_returns), which keeps the value noise "
        "of a minibatch with nothing to learn small instead of scaling it to unit size.",
        _GROUP,
    )
