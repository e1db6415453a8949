"""The settings of every family that learns from a replay (value-based and continuous
control), declared once; each family's settings inherit them.

Must not: import torch (the config, and with it `sampleforge --help`, stay light).
"""

from __future__ import annotations

from dataclasses import dataclass

from sampleforge.algo.settings import ReturnSettings, setting

_GROUP = "replay"


@dataclass(frozen=True)
class ReplaySettings(ReturnSettings):
    """The replay, its sampling ratio and the target networks of the replay families."""

    n_step: int = setting(1, "Steps of reward before the bootstrap (n-step returns).", _GROUP)
    replay_size: int = setting(100_000, "Transitions the replay holds (per policy).", _GROUP)
    learning_starts: int = setting(1_000, "Transitions stored before the first update.", _GROUP)
    samples_per_insert: float = setting(
        8.0,
        "Replay ratio: transitions sampled for updates per transition inserted (the rate "
        "limiter holds it whatever the speeds of sampler and learner). The update-to-data "
        "ratio (UTD) is samples_per_insert / batch_size: UTD 2 at batch 256 is 512.",
        _GROUP,
    )
    target_update_period: int = setting(
        500, "Updates between target-network updates (1 with target_tau < 1: Polyak).", _GROUP
    )
    target_tau: float = setting(
        1.0, "Target update: target <- tau online + (1 - tau) target (1: a hard copy).", _GROUP
    )
    prioritized_replay: bool = setting(
        False, "Prioritized experience replay (Schaul et al. 2016).", _GROUP
    )
    priority_alpha: float = setting(0.6, "PER: priority exponent alpha.", _GROUP)
    priority_beta: float = setting(
        0.4, "PER: importance-weight exponent beta at the start, annealed to 1.", _GROUP
    )
