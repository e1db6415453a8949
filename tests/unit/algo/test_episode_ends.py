"""Truncations and terminations, mixed in one rollout, against a direct loop over episodes.

The env split writes a truncation at step t as `dones[t] = 0` with the true final observation
at t + 1, followed by a reset step (`dones = 1`, `valids = 0`, reward 0) whose value is therefore
V(final observation); a termination is `dones[t] = 1` with the next episode's first observation
at t + 1 (`sampleforge.envs.stepping.env_split`). The references below know nothing of that
encoding: they are written in terms of episodes, with terminal value 0 after a termination and
V(final observation) after a truncation.
"""

from __future__ import annotations

import pytest
import torch

from sampleforge.algo.gae import gae_advantages
from sampleforge.algo.vtrace import vtrace_targets

GAMMA = 0.9

# Per column: how each step ends ("" goes on, "term", "trunc"), and "reset" for the invalid
# reset step the split writes after a truncation. Column 2 is truncated at the last step, so
# its final observation is the rollout's bootstrap observation.
ENDINGS = [
    ["", "", "", "trunc", "reset", "", "", "", "term", "", "", ""],
    ["", "", "term", "", "", "", "", "", "", "", "trunc", "reset"],
    ["", "", "", "", "", "term", "", "", "", "", "", "trunc"],
]
T, B = len(ENDINGS[0]), len(ENDINGS)


def _rollout(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    behaviour = -torch.rand(T, B, generator=g, dtype=torch.float64)
    ends = [[ENDINGS[b][t] for b in range(B)] for t in range(T)]
    dones = torch.tensor([[e in ("term", "reset") for e in row] for row in ends]).double()
    valids = torch.tensor([[e != "reset" for e in row] for row in ends]).double()
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64) * valids
    return {
        "behaviour_log_probs": behaviour,
        "target_log_probs": behaviour + 0.5 * torch.randn(T, B, generator=g, dtype=torch.float64),
        "rewards": rewards,
        "values": torch.randn(T, B, generator=g, dtype=torch.float64),
        "bootstrap_value": torch.randn(B, generator=g, dtype=torch.float64),
        "dones": dones,
        "valids": valids,
    }


def _value_after(r: dict, t: int, b: int) -> float:
    """The value of the state after step t's transition, by the episode's own rules."""
    ending = ENDINGS[b][t]
    if ending == "term":
        return 0.0
    # Going on, or truncated: the observation written for t + 1 (for a truncation, the final
    # observation) is the next state.
    return float(r["values"][t + 1, b]) if t + 1 < T else float(r["bootstrap_value"][b])


def _episode_steps(b: int, s: int) -> list[int]:
    """Steps s, s+1, ... of the episode step s belongs to, up to its end or the rollout's."""
    steps = []
    for t in range(s, T):
        steps.append(t)
        if ENDINGS[b][t] in ("term", "trunc"):
            break
    return steps


def _reference_vtrace(r: dict, rho_bar: float, c_bar: float) -> tuple[dict, dict]:
    ratio = (r["target_log_probs"] - r["behaviour_log_probs"]).exp()
    vs, adv = {}, {}
    for b in range(B):
        for s in range(T):
            if ENDINGS[b][s] == "reset":
                continue
            v_s, coef = float(r["values"][s, b]), 1.0
            for t in _episode_steps(b, s):
                rho = min(rho_bar, float(ratio[t, b]))
                delta = rho * (
                    float(r["rewards"][t, b])
                    + GAMMA * _value_after(r, t, b)
                    - float(r["values"][t, b])
                )
                v_s += coef * delta
                coef *= GAMMA * min(c_bar, float(ratio[t, b]))
            vs[s, b] = v_s
    for (s, b), _ in vs.items():
        ending = ENDINGS[b][s]
        if ending == "term":
            next_vs = 0.0
        elif ending == "trunc" or s + 1 == T:
            next_vs = _value_after(r, s, b)
        else:
            next_vs = vs[s + 1, b]
        rho = min(rho_bar, float(ratio[s, b]))
        adv[s, b] = rho * (float(r["rewards"][s, b]) + GAMMA * next_vs - float(r["values"][s, b]))
    return vs, adv


def _reference_gae(r: dict, lambda_: float) -> dict:
    advantages = {}
    for b in range(B):
        for s in range(T):
            if ENDINGS[b][s] == "reset":
                continue
            total, coef = 0.0, 1.0
            for t in _episode_steps(b, s):
                delta = (
                    float(r["rewards"][t, b])
                    + GAMMA * _value_after(r, t, b)
                    - float(r["values"][t, b])
                )
                total += coef * delta
                coef *= GAMMA * lambda_
            advantages[s, b] = total
    return advantages


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (0.5, 2.0)])
def test_vtrace_bootstraps_truncations_and_not_terminations(seed, rho_bar, c_bar):
    r = _rollout(seed)
    out = vtrace_targets(gamma=GAMMA, rho_bar=rho_bar, c_bar=c_bar, **r)
    vs, adv = _reference_vtrace(r, rho_bar, c_bar)
    for (s, b), expected in vs.items():
        assert float(out.vs[s, b]) == pytest.approx(expected, abs=1e-9), (s, b)
        assert float(out.pg_advantages[s, b]) == pytest.approx(adv[s, b], abs=1e-9), (s, b)
    resets = r["valids"] == 0
    assert (out.pg_advantages[resets] == 0).all()  # the reset steps teach nothing


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lambda_", [0.0, 0.95, 1.0])
def test_gae_bootstraps_truncations_and_not_terminations(seed, lambda_):
    r = _rollout(seed)
    advantages, returns = gae_advantages(
        rewards=r["rewards"],
        values=r["values"],
        bootstrap_value=r["bootstrap_value"],
        dones=r["dones"],
        gamma=GAMMA,
        lambda_=lambda_,
        valids=r["valids"],
    )
    for (s, b), expected in _reference_gae(r, lambda_).items():
        assert float(advantages[s, b]) == pytest.approx(expected, abs=1e-9), (s, b)
        assert float(returns[s, b]) == pytest.approx(expected + float(r["values"][s, b]), abs=1e-9)
    assert (advantages[r["valids"] == 0] == 0).all()


def test_treating_the_truncation_as_a_termination_gives_other_targets():
    # The references are sensitive to the encoding: a truncation written as a termination
    # (the old behaviour) does not match them.
    r = _rollout(0)
    wrong = dict(r, dones=r["dones"].clone())
    wrong["dones"][3, 0] = 1.0
    out = vtrace_targets(gamma=GAMMA, **wrong)
    vs, _ = _reference_vtrace(r, 1.0, 1.0)
    assert float(out.vs[3, 0]) != pytest.approx(vs[3, 0], abs=1e-6)
