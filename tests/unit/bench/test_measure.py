"""Pure simulation (bench/measure.py) counts agent steps of single- and multi-agent envs."""

from __future__ import annotations

from sampleforge.bench.measure import _simulate
from sampleforge.envs.registry import resolve_env


def test_pure_simulation_steps_a_multi_agent_env_and_counts_every_seat():
    # It raised IndexError on duel (a MultiAgentEnv) before.
    steps = _simulate(resolve_env("duel"), num_envs=2, seconds=0.5, index=0)
    assert steps > 0 and steps % 2 == 0  # duel has two seats


def test_pure_simulation_steps_a_gymnasium_env():
    assert _simulate(resolve_env("CartPole-v1"), num_envs=2, seconds=0.3, index=0) > 100
