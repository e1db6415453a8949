"""Every loss setting the learner uses comes from the config field of the same name."""

import dataclasses

from sampleforge.algo.actor_critic_loss import LossSettings
from sampleforge.config import make_config
from sampleforge.learners.actor_critic import loss_settings


def test_every_loss_setting_is_read_from_the_config() -> None:
    # Values that differ from LossSettings' own defaults, so a field left out shows.
    cfg = make_config(
        algorithm="impala",
        gamma=0.9,
        gae_lambda=0.8,
        with_vtrace=False,
        vtrace_rho_bar=2.0,
        vtrace_c_bar=0.5,
        ppo_clip_ratio=0.3,
        ppo_dual_clip=2.5,
        value_clip=0.4,
        value_loss_coeff=0.7,
        entropy_coeff=0.02,
        exploration_loss="symmetric_kl",
        normalize_advantages=False,
        advantage_scale="return_std",
        normalize_returns=True,
    )
    settings = loss_settings(cfg)
    defaults = LossSettings(algorithm="appo")
    for field in dataclasses.fields(LossSettings):
        assert getattr(settings, field.name) == getattr(cfg, field.name), field.name
        assert getattr(settings, field.name) != getattr(defaults, field.name), field.name
