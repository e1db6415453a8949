"""C51's projection, the quantile Huber loss and FQF's fractions against direct computations."""

from __future__ import annotations

import math

import pytest
import torch

from sampleforge.algo.distributional import (
    categorical_projection,
    fraction_loss,
    fraction_proposal,
    qr_fractions,
    quantile_huber_loss,
)


def _projection_loop(probs, returns, discounts, support):
    """Bellemare et al. 2017, Algorithm 1, one atom at a time."""
    n = len(support)
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (n - 1)
    out = [[0.0] * n for _ in probs]
    for i, row in enumerate(probs):
        for j, p in enumerate(row):
            tz = min(max(returns[i] + discounts[i] * support[j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = math.floor(b), math.ceil(b)
            if lo == hi:
                out[i][lo] += p
            else:
                out[i][lo] += p * (hi - b)
                out[i][hi] += p * (b - lo)
    return out


def test_categorical_projection_matches_algorithm_1():
    g = torch.Generator().manual_seed(0)
    support = torch.linspace(-10, 10, 51, dtype=torch.float64)
    probs = torch.softmax(torch.randn(64, 51, generator=g, dtype=torch.float64), dim=1)
    returns = torch.randn(64, generator=g, dtype=torch.float64) * 6
    discounts = torch.full((64,), 0.99**3, dtype=torch.float64)
    discounts[::5] = 0.0  # terminated: all mass at the (clipped) return
    returns[3] = 0.4  # lands exactly on an atom when discounted to 0... and others between
    got = categorical_projection(
        next_probs=probs, returns=returns, discounts=discounts, support=support
    )
    expected = _projection_loop(
        probs.tolist(), returns.tolist(), discounts.tolist(), support.tolist()
    )
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(got.sum(dim=1), torch.ones(64, dtype=torch.float64))


def test_projection_of_a_point_on_an_atom_keeps_its_mass_there():
    support = torch.linspace(-2, 2, 5)
    probs = torch.zeros(1, 5)
    probs[0, 2] = 1.0  # all mass at z = 0
    got = categorical_projection(
        next_probs=probs,
        returns=torch.tensor([1.0]),
        discounts=torch.tensor([1.0]),
        support=support,
    )
    torch.testing.assert_close(got, torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]))


@pytest.mark.parametrize("v_min, v_max, n_atoms", [(-1.0, 3.3, 51), (-10.0, 200.0, 51)])
def test_a_return_clipped_at_v_max_lands_on_the_last_atom(v_min, v_max, n_atoms):
    # In float32, (v_max - v_min) / delta_z rounds above N - 1 on these supports.
    support = torch.linspace(v_min, v_max, n_atoms)
    probs = torch.softmax(torch.randn(2, n_atoms, generator=torch.Generator().manual_seed(0)), 1)
    got = categorical_projection(
        next_probs=probs,
        returns=torch.tensor([v_max + 5.0, v_min - 5.0]),
        discounts=torch.zeros(2),
        support=support,
    )
    expected = torch.zeros(2, n_atoms)
    expected[0, -1] = expected[1, 0] = 1.0
    torch.testing.assert_close(got, expected)


def _quantile_huber_loop(quantiles, targets, taus, kappa):
    total = []
    for q_row, t_row, tau_row in zip(quantiles, targets, taus):
        s = 0.0
        for q, tau in zip(q_row, tau_row):
            acc = 0.0
            for t in t_row:
                u = t - q
                if kappa > 0:
                    h = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                    h /= kappa
                else:
                    h = abs(u)
                acc += abs(tau - (1.0 if u < 0 else 0.0)) * h
            s += acc / len(t_row)
        total.append(s)
    return total


@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.5])
def test_quantile_huber_loss_matches_its_definition(kappa):
    g = torch.Generator().manual_seed(1)
    quantiles = torch.randn(8, 5, generator=g, dtype=torch.float64) * 3
    targets = torch.randn(8, 7, generator=g, dtype=torch.float64) * 3
    taus = torch.rand(8, 5, generator=g, dtype=torch.float64)
    got = quantile_huber_loss(quantiles=quantiles, targets=targets, fractions=taus, kappa=kappa)
    expected = _quantile_huber_loop(quantiles.tolist(), targets.tolist(), taus.tolist(), kappa)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))


def test_minimising_the_quantile_loss_finds_the_quantiles():
    """The loss's minimiser at fraction tau is the tau-quantile of the targets."""
    targets = torch.arange(1, 101, dtype=torch.float64)[None, :]  # 1..100
    taus = qr_fractions(4, dtype=torch.float64)
    quantiles = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([quantiles], lr=0.5)
    for _ in range(3000):
        optimizer.zero_grad()
        quantile_huber_loss(
            quantiles=quantiles, targets=targets, fractions=taus, kappa=0.0
        ).sum().backward()
        optimizer.step()
    expected = torch.tensor([13.0, 38.0, 63.0, 88.0], dtype=torch.float64)  # 12.5%, 37.5%, ...
    torch.testing.assert_close(quantiles.detach()[0], expected, atol=1.0, rtol=0)


def test_qr_fractions_are_the_midpoints():
    torch.testing.assert_close(qr_fractions(4), torch.tensor([0.125, 0.375, 0.625, 0.875]))


def test_fraction_proposal_is_increasing_from_zero_to_one_with_midpoints():
    g = torch.Generator().manual_seed(2)
    tau, tau_hat = fraction_proposal(torch.randn(6, 8, generator=g) * 3)
    assert tau.shape == (6, 9) and tau_hat.shape == (6, 8)
    assert torch.all(tau[:, 0] == 0) and torch.all(tau[:, -1] == 1)
    assert torch.all(tau[:, 1:] >= tau[:, :-1])
    torch.testing.assert_close(tau_hat, (tau[:, 1:] + tau[:, :-1]) / 2)


def test_fraction_loss_gradient_is_the_wasserstein_gradient():
    """For a known quantile function F^-1(x) = x^2, the gradient of the loss with respect to each
    inner tau_i is 2 F^-1(tau_i) - F^-1(tau_hat_i) - F^-1(tau_hat_{i-1}) (FQF, Prop. 1)."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 6, generator=g, dtype=torch.float64)
    tau, tau_hat = fraction_proposal(logits)
    tau = tau.detach().requires_grad_(True)
    inverse_cdf = lambda x: x**2  # noqa: E731
    loss = fraction_loss(
        tau=tau,
        quantiles_at_tau=inverse_cdf(tau[:, 1:-1]),
        quantiles_at_tau_hat=inverse_cdf(tau_hat),
    )
    loss.backward()
    t, th = tau.detach(), tau_hat.detach()
    expected = (2 * t[:, 1:-1] ** 2 - th[:, 1:] ** 2 - th[:, :-1] ** 2) / 3  # mean over B = 3
    torch.testing.assert_close(tau.grad[:, 1:-1], expected)
    assert torch.all(tau.grad[:, [0, -1]] == 0)


def test_fraction_loss_gradient_matches_the_w1_distance_numerically():
    """The W1 distance between F^-1 and its staircase approximation at tau_hat, integrated
    numerically, has the same derivative in tau_1 as the loss (finite differences)."""
    inverse_cdf = lambda x: torch.tan(3.0 * (x - 0.5))  # noqa: E731 - any increasing F^-1

    def w1(tau):
        """sum_i integral over [tau_i, tau_{i+1}] of |F^-1(w) - F^-1(tau_hat_i)|, each piece
        split at tau_hat_i, where the integrand has its kink, and integrated by trapezoids."""
        total = torch.zeros((), dtype=torch.float64)
        for lo, hi in zip(tau[:-1], tau[1:]):
            mid = (lo + hi) / 2
            for a, b in ((lo, mid), (mid, hi)):
                w = torch.linspace(float(a), float(b), 20_001, dtype=torch.float64)
                total = total + torch.trapezoid((inverse_cdf(w) - inverse_cdf(mid)).abs(), w)
        return total

    tau = torch.tensor([0.0, 0.2, 0.45, 0.8, 1.0], dtype=torch.float64)
    eps = 1e-4
    bumped_up, bumped_down = tau.clone(), tau.clone()
    bumped_up[2] += eps
    bumped_down[2] -= eps
    numeric = (w1(bumped_up) - w1(bumped_down)) / (2 * eps)
    t = tau.clone().requires_grad_(True)
    tau_hat = (tau[1:] + tau[:-1]) / 2
    fraction_loss(
        tau=t[None],
        quantiles_at_tau=inverse_cdf(tau[1:-1])[None],
        quantiles_at_tau_hat=inverse_cdf(tau_hat)[None],
    ).backward()
    assert float(t.grad[2]) == pytest.approx(float(numeric), rel=1e-4)
