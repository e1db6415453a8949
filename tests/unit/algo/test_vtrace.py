"""V-trace checked against a direct, non-recursive reading of IMPALA eq. 1."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sampleforge.algo.gae import n_step_returns
from sampleforge.algo.vtrace import VTraceReturns, importance_ratio, vtrace_targets


def make_rollout(seed: int, T: int = 7, B: int = 4, log_ratio_scale: float = 0.8) -> dict:
    g = torch.Generator().manual_seed(seed)
    behaviour = -torch.rand(T, B, generator=g, dtype=torch.float64) * 2.0
    target = behaviour + torch.randn(T, B, generator=g, dtype=torch.float64) * log_ratio_scale
    dones = (torch.rand(T, B, generator=g, dtype=torch.float64) < 0.25).double()
    dones[2, 0] = 1.0  # at least one episode end strictly inside the rollout
    return {
        "behaviour_log_probs": behaviour,
        "target_log_probs": target,
        "rewards": torch.randn(T, B, generator=g, dtype=torch.float64),
        "values": torch.randn(T, B, generator=g, dtype=torch.float64),
        "bootstrap_value": torch.randn(B, generator=g, dtype=torch.float64),
        "dones": dones,
    }


def reference_vtrace(
    behaviour_log_probs,
    target_log_probs,
    rewards,
    values,
    bootstrap_value,
    dones,
    gamma,
    rho_bar,
    c_bar,
    valids=None,
):
    """IMPALA eq. 1 written out as a double sum, with per-step discounts:

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t,
    delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),
    A_s = rho_s (r_s + gamma_s v_{s+1} - V(x_s)).
    An invalid step has ratio 0, hence rho = c = 0.
    """
    T, B = rewards.shape
    r = rewards.tolist()
    d = dones.tolist()
    ratio = (target_log_probs - behaviour_log_probs).exp().tolist()
    if valids is not None:
        ratio = [[ratio[t][b] * valids[t][b].item() for b in range(B)] for t in range(T)]
    V = values.tolist() + [bootstrap_value.tolist()]  # V[t][b] = V(x_t), t = 0..T

    def discount(t, b):
        return gamma * (1.0 - d[t][b])

    def rho(t, b):
        return min(rho_bar, ratio[t][b])

    def c(t, b):
        return min(c_bar, ratio[t][b])

    vs = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for s in range(T):
            total = V[s][b]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discount(i, b) * c(i, b)
                delta_t = rho(t, b) * (r[t][b] + discount(t, b) * V[t + 1][b] - V[t][b])
                total += weight * delta_t
            vs[s][b] = total

    vs_next = vs[1:] + [bootstrap_value.tolist()]
    advantages = [
        [rho(s, b) * (r[s][b] + discount(s, b) * vs_next[s][b] - V[s][b]) for b in range(B)]
        for s in range(T)
    ]
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(advantages, dtype=torch.float64)


@pytest.mark.parametrize(
    "rho_bar, c_bar", [(1.0, 1.0), (0.8, 0.5), (2.0, 1.5), (1.5, 0.9), (0.9, 1.6)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_double_sum_definition(seed: int, rho_bar: float, c_bar: float) -> None:
    rollout = make_rollout(seed)
    gamma = 0.9

    out = vtrace_targets(**rollout, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)
    ref_vs, ref_adv = reference_vtrace(**rollout, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)

    ratios = (rollout["target_log_probs"] - rollout["behaviour_log_probs"]).exp()
    for bar in (rho_bar, c_bar):  # clipping really bites, and not everywhere
        assert (ratios > bar).any() and (ratios < bar).any()
    assert rollout["dones"][:-1].any()  # an episode ends inside the rollout
    torch.testing.assert_close(out.vs, ref_vs)
    torch.testing.assert_close(out.pg_advantages, ref_adv)
    torch.testing.assert_close(out.clipped_rhos, ratios.clamp(max=rho_bar))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    T=st.integers(1, 6),
    B=st.integers(1, 3),
    gamma=st.floats(0.0, 1.0),
    rho_bar=st.floats(0.1, 3.0),
    c_bar=st.floats(0.1, 3.0),
)
def test_matches_double_sum_property(seed, T, B, gamma, rho_bar, c_bar) -> None:
    rollout = make_rollout(seed, T=max(T, 3), B=B)
    rollout = {k: v[:T] if v.dim() == 2 else v for k, v in rollout.items()}
    out = vtrace_targets(**rollout, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)
    ref_vs, ref_adv = reference_vtrace(**rollout, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)
    torch.testing.assert_close(out.vs, ref_vs)
    torch.testing.assert_close(out.pg_advantages, ref_adv)


def test_episode_end_cuts_the_trace() -> None:
    rollout = make_rollout(3, T=6, B=2)
    rollout["dones"].zero_()
    rollout["dones"][2, 0] = 1.0
    base = vtrace_targets(**rollout, gamma=0.99)
    changed = dict(
        rollout,
        rewards=rollout["rewards"].clone(),
        bootstrap_value=rollout["bootstrap_value"] + 100.0,
    )
    changed["rewards"][3:, 0] += 100.0
    out = vtrace_targets(**changed, gamma=0.99)
    # steps 0..2 of episode in column 0 do not see anything after the episode end
    torch.testing.assert_close(out.vs[:3, 0], base.vs[:3, 0])
    assert not torch.allclose(out.vs[3:, 0], base.vs[3:, 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_policy_equals_n_step_returns(seed: int) -> None:
    rollout = make_rollout(seed)
    rollout["target_log_probs"] = rollout["behaviour_log_probs"].clone()
    gamma = 0.97

    out = vtrace_targets(**rollout, gamma=gamma, rho_bar=1.0, c_bar=1.0)
    expected = n_step_returns(
        rewards=rollout["rewards"],
        bootstrap_value=rollout["bootstrap_value"],
        dones=rollout["dones"],
        gamma=gamma,
    )
    torch.testing.assert_close(out.vs, expected)
    torch.testing.assert_close(out.clipped_rhos, torch.ones_like(out.vs))


def test_masked_steps_match_reference_and_are_ignored() -> None:
    rollout = make_rollout(5)
    valids = torch.ones_like(rollout["rewards"])
    valids[4, 1] = 0.0
    valids[5:, 2] = 0.0
    valids[0, 3] = 0.0
    out = vtrace_targets(**rollout, gamma=0.95, rho_bar=1.2, c_bar=0.9, valids=valids)
    ref_vs, ref_adv = reference_vtrace(**rollout, gamma=0.95, rho_bar=1.2, c_bar=0.9, valids=valids)
    torch.testing.assert_close(out.vs, ref_vs)
    torch.testing.assert_close(out.pg_advantages, ref_adv)

    invalid = valids == 0
    wild = dict(rollout)
    for key in ("rewards", "behaviour_log_probs", "target_log_probs", "dones"):
        wild[key] = torch.where(invalid, torch.full_like(rollout[key], 1e6), rollout[key])
    wild["rewards"] = torch.where(
        invalid, torch.full_like(wild["rewards"], math.inf), wild["rewards"]
    )
    out_wild = vtrace_targets(**wild, gamma=0.95, rho_bar=1.2, c_bar=0.9, valids=valids)
    torch.testing.assert_close(out_wild.vs, out.vs)
    torch.testing.assert_close(out_wild.pg_advantages, out.pg_advantages)
    assert (out.pg_advantages[invalid] == 0).all()
    torch.testing.assert_close(out.vs[invalid], rollout["values"][invalid])


@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
def test_extreme_log_ratios_stay_finite(log_ratio: float) -> None:
    rollout = make_rollout(0)
    rollout["target_log_probs"] = rollout["behaviour_log_probs"] + log_ratio
    for rho_bar, c_bar in [(1.0, 1.0), (1e12, 1e12)]:
        out = vtrace_targets(**rollout, gamma=0.99, rho_bar=rho_bar, c_bar=c_bar)
        for tensor in (out.vs, out.pg_advantages, out.clipped_rhos):
            assert torch.isfinite(tensor).all()
    assert torch.isfinite(importance_ratio(torch.tensor([1e4]), torch.tensor([-1e4]))).all()


def test_outputs_carry_no_grad_and_are_float32_friendly() -> None:
    rollout = {k: v.float().requires_grad_(k != "dones") for k, v in make_rollout(1).items()}
    out = vtrace_targets(**rollout, gamma=0.99)
    assert isinstance(out, VTraceReturns)
    for tensor in (out.vs, out.pg_advantages, out.clipped_rhos):
        assert not tensor.requires_grad
        assert tensor.dtype == torch.float32
        assert tensor.shape == rollout["rewards"].shape


def test_frozen_result() -> None:
    out = vtrace_targets(**make_rollout(0), gamma=0.9)
    with pytest.raises(AttributeError):
        out.vs = out.vs  # type: ignore[misc]


def test_shape_mismatch_raises() -> None:
    rollout = make_rollout(0)
    rollout["bootstrap_value"] = rollout["bootstrap_value"][:-1]
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace_targets(**rollout, gamma=0.9)
