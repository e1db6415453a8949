"""Win rate of a policy in matches against an env's built-in opponent (e.g. `duel_vs_bot`).

Responsibility: play `matches` episodes of a single-agent env whose final step reports
`info["win"]` (1 win, 0.5 draw, 0 loss), all at once with one batched forward pass per step,
from seeds derived from `seed`, and count the outcomes. This is how self-play progress is
measured against a fixed yardstick.

Must not: train, or know any particular game.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sampleforge.envs.registry import EnvContext, EnvSpec, make_env
from sampleforge.evaluation.episodes import episode_seed
from sampleforge.evaluation.local_policy import LocalPolicy


@dataclass(frozen=True)
class MatchResult:
    """Outcome shares over `matches` matches."""

    matches: int
    wins: float
    draws: float
    losses: float


def play_matches(
    policy: LocalPolicy,
    env_spec: EnvSpec,
    matches: int = 100,
    seed: int | None = 0,
    deterministic: bool = True,
) -> MatchResult:
    """Play `matches` episodes at once; each must end with `info["win"]`."""
    envs = [make_env(env_spec, EnvContext(env_index=i)) for i in range(matches)]
    try:
        observations = [env.reset(seed=episode_seed(seed, i))[0] for i, env in enumerate(envs)]
        states = torch.zeros(matches, policy.rnn_state_size)
        outcomes: list[float | None] = [None] * matches
        while any(o is None for o in outcomes):
            actions, states = policy.act(observations, states, deterministic=deterministic)
            for i, env in enumerate(envs):
                if outcomes[i] is not None:
                    continue  # finished: its observation stays as it was, its action is unused
                observations[i], _, terminated, truncated, info = env.step(actions[i])
                if terminated or truncated:
                    if "win" not in info:
                        raise ValueError(
                            f"env {env_spec.name!r} does not report info['win'] "
                            "at the end of an episode; matches need an outcome"
                        )
                    outcomes[i] = float(info["win"])
    finally:
        for env in envs:
            env.close()
    results = np.asarray(outcomes)
    return MatchResult(
        matches=matches,
        wins=float((results == 1.0).mean()),
        draws=float((results == 0.5).mean()),
        losses=float((results == 0.0).mean()),
    )
