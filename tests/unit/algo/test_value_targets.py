"""n-step returns and Q(lambda) targets against direct loops over episodes, with truncations
and terminations mixed in one rollout (the encoding of `sampleforge.algo.gae`)."""

from __future__ import annotations

import pytest
import torch

from sampleforge.algo.value_targets import n_step_returns, q_lambda_targets

GAMMA = 0.9

# Per column, how each step ends: "" goes on, "term", "trunc", and "reset" for the invalid
# step the env split writes after a truncation (its observation is the final one).
ENDINGS = [
    ["", "", "", "trunc", "reset", "", "", "", "term", "", "", ""],
    ["", "", "term", "", "", "", "", "", "", "", "trunc", "reset"],
    ["", "", "", "", "", "term", "", "", "", "", "", "trunc"],
    ["", "", "", "", "", "", "", "", "", "", "", ""],
]
T, B = len(ENDINGS[0]), len(ENDINGS)


def _rollout(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ends = [[ENDINGS[b][t] for b in range(B)] for t in range(T)]
    dones = torch.tensor([[e in ("term", "reset") for e in row] for row in ends]).double()
    valids = torch.tensor([[e != "reset" for e in row] for row in ends]).double()
    return {
        "rewards": torch.randn(T, B, generator=g, dtype=torch.float64) * valids,
        "dones": dones,
        "valids": valids,
        # max_a Q(s_t, a) for t = 0..T (the last is the bootstrap observation's).
        "max_q": torch.randn(T + 1, B, generator=g, dtype=torch.float64),
    }


def _n_step_reference(r: dict, t: int, b: int, n: int) -> float:
    """The n-step target with max_q as Q, by the episode's own rules."""
    total, discount = 0.0, 1.0
    for k in range(n):
        step = t + k
        if k > 0 and ENDINGS[b][step] == "reset":  # the final observation is at `step`
            return total + discount * float(r["max_q"][step, b])
        total += discount * float(r["rewards"][step, b])
        discount *= GAMMA
        if ENDINGS[b][step] == "term":
            return total
    return total + discount * float(r["max_q"][t + n, b])


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_returns_match_a_direct_loop(n):
    r = _rollout(seed=n)
    for t in range(T - n + 1):
        window = slice(t, t + n)
        out = n_step_returns(
            rewards=r["rewards"][window],
            dones=r["dones"][window],
            valids=r["valids"][window],
            gamma=GAMMA,
        )
        for b in range(B):
            if ENDINGS[b][t] == "reset":
                continue  # never sampled
            bootstrap = float(r["max_q"][t + int(out.steps[b]), b])
            got = float(out.returns[b]) + float(out.discounts[b]) * bootstrap
            assert got == pytest.approx(_n_step_reference(r, t, b, n), abs=1e-12), (t, b)


def test_a_termination_is_never_bootstrapped_and_a_truncation_always_is():
    r = _rollout(seed=0)
    out = n_step_returns(
        rewards=r["rewards"][6:9], dones=r["dones"][6:9], valids=r["valids"][6:9], gamma=GAMMA
    )
    assert out.discounts[0] == 0.0  # column 0 terminates at step 8
    out = n_step_returns(
        rewards=r["rewards"][2:5], dones=r["dones"][2:5], valids=r["valids"][2:5], gamma=GAMMA
    )
    assert out.discounts[0] == pytest.approx(GAMMA**2)  # truncated at 3: final obs at 4
    assert int(out.steps[0]) == 2


def _q_lambda_reference(r: dict, t: int, b: int, lambda_: float) -> float:
    """G_t = r_t + gamma [lambda G_{t+1} + (1 - lambda) maxQ(s_{t+1})] written per episode:
    0 after a termination, the final observation's value after a truncation."""
    if ENDINGS[b][t] == "reset":
        return float(r["max_q"][t, b])
    if ENDINGS[b][t] == "term":
        return float(r["rewards"][t, b])
    if t + 1 == T:
        nxt_return = nxt_max = float(r["max_q"][T, b])
    else:
        nxt_max = float(r["max_q"][t + 1, b])
        nxt_return = _q_lambda_reference(r, t + 1, b, lambda_)
    return float(r["rewards"][t, b]) + GAMMA * (lambda_ * nxt_return + (1 - lambda_) * nxt_max)


@pytest.mark.parametrize("lambda_", [0.0, 0.65, 1.0])
def test_q_lambda_matches_a_direct_recursion(lambda_):
    r = _rollout(seed=7)
    got = q_lambda_targets(
        rewards=r["rewards"],
        dones=r["dones"],
        valids=r["valids"],
        max_q=r["max_q"][:T],
        bootstrap_max_q=r["max_q"][T],
        gamma=GAMMA,
        lambda_=lambda_,
    )
    for t in range(T):
        for b in range(B):
            assert float(got[t, b]) == pytest.approx(_q_lambda_reference(r, t, b, lambda_))


def test_q_lambda_zero_is_one_step_q_learning():
    r = _rollout(seed=3)
    got = q_lambda_targets(
        rewards=r["rewards"],
        dones=r["dones"],
        valids=None,
        max_q=r["max_q"][:T],
        bootstrap_max_q=r["max_q"][T],
        gamma=GAMMA,
        lambda_=0.0,
    )
    expected = r["rewards"] + GAMMA * (1 - r["dones"]) * r["max_q"][1:]
    torch.testing.assert_close(got, expected)
