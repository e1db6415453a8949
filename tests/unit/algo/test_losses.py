"""Individual loss terms: values, PPO clipping gradients, masking, extreme inputs."""

from __future__ import annotations

import math

import pytest
import torch

from sampleforge.algo.losses import (
    entropy_loss,
    masked_mean,
    normalize_advantages,
    policy_gradient_loss,
    ppo_clipped_policy_loss,
    value_loss,
)

EPS = 0.1  # clip window [1/1.1, 1.1]


def test_masked_mean() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    valids = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    torch.testing.assert_close(masked_mean(x, valids), torch.tensor(2.0))
    torch.testing.assert_close(masked_mean(x), x.mean())
    torch.testing.assert_close(masked_mean(x, torch.zeros_like(x)), torch.tensor(0.0))
    with_inf = torch.tensor([[1.0, 2.0], [3.0, math.inf]])
    torch.testing.assert_close(masked_mean(with_inf, valids), torch.tensor(2.0))
    with pytest.raises(ValueError):
        masked_mean(x, valids[0])


def test_masked_mean_gradient_skips_masked_entries() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    masked_mean(x * 2.0, torch.tensor([1.0, 0.0, 1.0])).backward()
    torch.testing.assert_close(x.grad, torch.tensor([1.0, 0.0, 1.0]))


def test_normalize_advantages() -> None:
    g = torch.Generator().manual_seed(0)
    advantages = torch.randn(6, 4, generator=g) * 5 + 3
    valids = (torch.rand(6, 4, generator=g) > 0.3).float()
    advantages_wild = torch.where(valids > 0, advantages, torch.full_like(advantages, 1e9))
    normalized = normalize_advantages(advantages_wild, valids)
    selected = normalized[valids > 0]
    torch.testing.assert_close(selected.mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(selected.std(unbiased=False), torch.tensor(1.0), atol=1e-4, rtol=0)
    assert (normalized[valids == 0] == 0).all()

    plain = normalize_advantages(advantages)
    torch.testing.assert_close(plain.mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    constant = normalize_advantages(torch.full((3, 2), 7.0))
    assert torch.isfinite(constant).all() and (constant == 0).all()


def _ppo_grad(
    ratios: list[float], advantages: list[float], dual_clip: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    behaviour = torch.full((len(ratios),), -1.0)
    log_probs = (behaviour + torch.log(torch.tensor(ratios))).requires_grad_(True)
    loss = ppo_clipped_policy_loss(
        log_probs=log_probs,
        behaviour_log_probs=behaviour,
        advantages=torch.tensor(advantages),
        clip_ratio=EPS,
        dual_clip=dual_clip,
    )
    loss.backward()
    return loss, log_probs.grad


def test_ppo_gradient_is_zero_exactly_where_the_clip_applies() -> None:
    ratios = [1.5, 0.5, 1.5, 0.5, 1.05, 0.95, 1.0]
    advantages = [1.0, -1.0, -1.0, 1.0, 1.0, -2.0, 0.5]
    loss, grad = _ppo_grad(ratios, advantages)

    # positive advantage and ratio > 1+eps; negative advantage and ratio < 1/(1+eps): clipped
    assert grad[0] == 0.0 and grad[1] == 0.0
    # the clip does not apply in the other direction (pessimistic bound keeps r*A) ...
    # ... nor inside the window: d/dlogp of -r*A/N = -r*A/N
    n = len(ratios)
    for i in (2, 3, 4, 5, 6):
        assert grad[i] != 0.0
        torch.testing.assert_close(grad[i], torch.tensor(-ratios[i] * advantages[i] / n))

    surrogate = [
        min(r * a, min(max(r, 1 / (1 + EPS)), 1 + EPS) * a) for r, a in zip(ratios, advantages)
    ]
    torch.testing.assert_close(loss, torch.tensor(-sum(surrogate) / n))


def test_dual_clip_bounds_only_huge_ratios_on_negative_advantages() -> None:
    # A huge ratio on a negative advantage: r*A = -200 without the dual clip, -3*2 with c = 3.
    ratios = [100.0, 100.0, 2.0, 1.05, 0.5]
    advantages = [-2.0, 2.0, -1.0, -1.0, 1.0]
    n = len(ratios)
    plain_loss, plain_grad = _ppo_grad(ratios, advantages)
    loss, grad = _ppo_grad(ratios, advantages, dual_clip=3.0)

    assert plain_grad[0] != 0.0 and grad[0] == 0.0  # bounded at c*A: no gradient
    torch.testing.assert_close(grad[1:], plain_grad[1:])  # r < c or A > 0: unchanged
    expected = [-3.0 * 2.0, (1 + EPS) * 2.0, 2.0 * -1.0, 1.05 * -1.0, 0.5 * 1.0]
    torch.testing.assert_close(loss, torch.tensor(-sum(expected) / n))
    assert plain_loss > 30.0 > loss


def test_ppo_on_policy_is_minus_mean_advantage() -> None:
    log_probs = torch.tensor([[-0.3, -2.0], [-1.0, -0.1]])
    advantages = torch.tensor([[1.0, -3.0], [2.0, 4.0]])
    loss = ppo_clipped_policy_loss(
        log_probs=log_probs,
        behaviour_log_probs=log_probs.clone(),
        advantages=advantages,
        clip_ratio=0.2,
    )
    torch.testing.assert_close(loss, -advantages.mean())


def test_ppo_masked_entries_do_not_matter() -> None:
    g = torch.Generator().manual_seed(1)
    behaviour = -torch.rand(5, 3, generator=g)
    log_probs = behaviour + 0.3 * torch.randn(5, 3, generator=g)
    advantages = torch.randn(5, 3, generator=g)
    valids = (torch.rand(5, 3, generator=g) > 0.4).float()
    invalid = valids == 0

    def loss_and_grad(lp, blp, adv):
        lp = lp.clone().requires_grad_(True)
        loss = ppo_clipped_policy_loss(
            log_probs=lp, behaviour_log_probs=blp, advantages=adv, clip_ratio=EPS, valids=valids
        )
        loss.backward()
        return loss, lp.grad

    base_loss, base_grad = loss_and_grad(log_probs, behaviour, advantages)
    wild_loss, wild_grad = loss_and_grad(
        torch.where(invalid, torch.full_like(log_probs, 1e4), log_probs),
        torch.where(invalid, torch.full_like(behaviour, -1e4), behaviour),
        torch.where(invalid, torch.full_like(advantages, 1e30), advantages),
    )
    torch.testing.assert_close(wild_loss, base_loss)
    torch.testing.assert_close(wild_grad, base_grad)
    assert (wild_grad[invalid] == 0).all()


def test_policy_gradient_loss() -> None:
    log_probs = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    advantages = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    loss = policy_gradient_loss(log_probs=log_probs, advantages=advantages)
    loss.backward()
    torch.testing.assert_close(loss, -(log_probs * advantages).mean())
    torch.testing.assert_close(log_probs.grad, -advantages.detach() / 3)
    assert advantages.grad is None  # advantages are constants


def test_policy_gradient_is_not_clipped() -> None:
    # a ratio far outside any trust region still gets the full gradient
    log_probs = torch.tensor([5.0], requires_grad=True)
    policy_gradient_loss(log_probs=log_probs, advantages=torch.tensor([2.0])).backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([-2.0]))


def test_value_loss_unclipped_and_clipped() -> None:
    values = torch.tensor([1.0, 2.0, 0.0], requires_grad=True)
    targets = torch.tensor([0.0, 2.5, 1.0])
    torch.testing.assert_close(
        value_loss(values=values, targets=targets),
        0.5 * ((values - targets) ** 2).mean(),
    )

    old = torch.tensor([0.5, 2.0, -1.0])
    # clipped values with clip 0.2: [0.7, 2.0, -0.8]
    # squared errors unclipped [1, .25, 1], clipped [.49, .25, 3.24]; max = [1, .25, 3.24]
    loss = value_loss(values=values, targets=targets, old_values=old, clip_value=0.2)
    torch.testing.assert_close(loss, torch.tensor(0.5 * (1.0 + 0.25 + 3.24) / 3))
    loss.backward()
    # entry 2 is governed by the clipped branch whose value is constant in V: zero gradient
    assert values.grad[2] == 0.0 and values.grad[0] != 0.0

    with pytest.raises(ValueError, match="old_values"):
        value_loss(values=values, targets=targets, clip_value=0.2)


def test_value_loss_masked() -> None:
    values = torch.tensor([1.0, 50.0])
    targets = torch.tensor([0.0, -50.0])
    loss = value_loss(values=values, targets=targets, valids=torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(loss, torch.tensor(0.5))


def test_entropy_loss() -> None:
    entropy = torch.tensor([[0.5, 1.5], [1.0, 9.0]])
    torch.testing.assert_close(entropy_loss(entropy), -entropy.mean())
    valids = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    torch.testing.assert_close(entropy_loss(entropy, valids), torch.tensor(-1.0))


@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
def test_extreme_log_ratios_finite_losses_and_gradients(log_ratio: float) -> None:
    behaviour = torch.full((4, 2), -1.0)
    log_probs = (behaviour + log_ratio).requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0], [3.0, -2.0], [0.5, 0.0], [-4.0, 2.0]])
    values = torch.randn(4, 2, generator=torch.Generator().manual_seed(0)).requires_grad_(True)

    losses = [
        ppo_clipped_policy_loss(
            log_probs=log_probs,
            behaviour_log_probs=behaviour,
            advantages=advantages,
            clip_ratio=EPS,
        ),
        policy_gradient_loss(log_probs=log_probs, advantages=advantages),
        value_loss(
            values=values, targets=advantages * 1e3, old_values=values.detach() + 50, clip_value=0.2
        ),
        entropy_loss(-log_probs),
    ]
    for loss in losses:
        assert torch.isfinite(loss)
        grads = torch.autograd.grad(loss, [log_probs, values], allow_unused=True)
        for grad in grads:
            assert grad is None or torch.isfinite(grad).all()
