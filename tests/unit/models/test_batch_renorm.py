"""BatchRenorm (models/batch_renorm.py): plain batch norm during warm-up, Ioffe's clamped r and d
after it, running statistics as torch's BatchNorm keeps them, a checkpointed warm-up counter,
and independent statistics per ensemble member."""

from __future__ import annotations

from typing import TypeVar

import pytest
import torch
from torch import nn

from sampleforge.models.batch_renorm import BatchRenorm

F_ = 6  # features
B = 32  # batch


def batches(n: int, seed: int = 0, shift: float = 2.0, scale: float = 3.0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(B, F_, generator=generator) * scale + shift for _ in range(n)]


Norm = TypeVar("Norm", BatchRenorm, nn.BatchNorm1d)


def with_random_affine(norm: Norm, seed: int = 1) -> Norm:
    """The same non-trivial scale and shift in either layer (both start at 1 and 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(F_, generator=generator) + 0.5)
        norm.bias.copy_(torch.randn(F_, generator=generator))
    return norm


def test_equals_batchnorm1d_in_training_during_warmup_and_in_eval_after_it():
    renorm = with_random_affine(BatchRenorm(F_, momentum=0.1, eps=1e-3, warmup_steps=5))
    reference = with_random_affine(nn.BatchNorm1d(F_, momentum=0.1, eps=1e-3))
    for x in batches(5):
        assert torch.allclose(renorm(x), reference(x), atol=1e-5)
    assert torch.allclose(renorm.running_mean, reference.running_mean, atol=1e-6)
    assert torch.allclose(renorm.running_var, reference.running_var, atol=1e-5)
    renorm.eval()
    reference.eval()
    # Far from the running statistics, so that a renormalised batch (clamped r and d) would
    # not equal the running-statistics output that eval mode must give.
    (x,) = batches(1, seed=7, shift=30.0, scale=20.0)
    assert torch.allclose(renorm(x), reference(x), atol=1e-5)
    assert torch.allclose(renorm.running_mean, reference.running_mean, atol=1e-6)
    assert int(renorm.steps) == 5


def test_gradients_during_warmup_equal_batchnorm1d():
    renorm = with_random_affine(BatchRenorm(F_, warmup_steps=10)).double()
    reference = with_random_affine(nn.BatchNorm1d(F_, eps=1e-3)).double()
    (x,) = batches(1)
    x = x.double().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    target = torch.randn(B, F_, dtype=torch.float64)
    (renorm(x) * target).sum().backward()
    (reference(x_ref) * target).sum().backward()
    assert x.grad is not None and x_ref.grad is not None
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-10)
    assert torch.allclose(renorm.weight.grad, reference.weight.grad, atol=1e-10)


def direct_renorm(
    x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, eps: float, r_max: float, d_max: float
) -> torch.Tensor:
    """Ioffe 2017, algorithm 1, written out (unit affine)."""
    mu_b = x.mean(0)
    sigma_b = (x.var(0, unbiased=False) + eps).sqrt()
    sigma = (var + eps).sqrt()
    r = (sigma_b / sigma).clamp(1 / r_max, r_max)
    d = ((mu_b - mean) / sigma).clamp(-d_max, d_max)
    return (x - mu_b) / sigma_b * r + d


def test_after_warmup_r_and_d_are_clamped_as_the_formula_says():
    renorm = BatchRenorm(F_, eps=1e-3, warmup_steps=0, r_max=3.0, d_max=5.0).double()
    # Columns chosen to hit each clamp and the unclamped middle: the running stats are mean 0,
    # var 1, so r = sigma_B and d = mu_B. Column 0: r > r_max; 1: r < 1/r_max; 2: d > d_max;
    # 3: d < -d_max; 4 and 5: inside both bounds.
    generator = torch.Generator().manual_seed(0)
    unit = torch.randn(B, F_, generator=generator, dtype=torch.float64)
    unit = (unit - unit.mean(0)) / unit.std(0, unbiased=False)
    scale = torch.tensor([10.0, 0.05, 1.0, 1.0, 1.5, 0.6], dtype=torch.float64)
    shift = torch.tensor([0.0, 0.0, 40.0, -40.0, 2.0, -1.0], dtype=torch.float64)
    x = unit * scale + shift
    before_mean, before_var = renorm.running_mean.clone(), renorm.running_var.clone()
    expected = direct_renorm(x, before_mean, before_var, 1e-3, 3.0, 5.0)
    y = renorm(x)
    assert torch.allclose(y, expected, atol=1e-10)
    # The clamps bit: plain batch norm would differ, and so would unclamped r and d.
    plain = (x - x.mean(0)) / (x.var(0, unbiased=False) + 1e-3).sqrt()
    assert not torch.allclose(y, plain, atol=1e-3)
    unclamped = direct_renorm(x, before_mean, before_var, 1e-3, 1e9, 1e9)
    assert not torch.allclose(y[:, :4], unclamped[:, :4], atol=1e-3)
    assert torch.allclose(y[:, 4:], unclamped[:, 4:], atol=1e-10)


def test_after_warmup_r_and_d_carry_no_gradient():
    renorm = BatchRenorm(F_, warmup_steps=0).double()
    with torch.no_grad():
        renorm.running_mean.fill_(0.5)
        renorm.running_var.fill_(2.0)
    (x,) = batches(1)
    x = x.double().requires_grad_()
    target = torch.randn(B, F_, dtype=torch.float64)
    (renorm(x) * target).sum().backward()
    # With r and d constants, y = x_hat * r + d and dL/dx is batch norm's gradient times r.
    x_ref = x.detach().clone().requires_grad_()
    sigma_b = (x_ref.var(0, unbiased=False) + 1e-3).sqrt()
    r = (sigma_b.detach() / (2.0 + 1e-3) ** 0.5).clamp(1 / 3, 3)
    x_hat = (x_ref - x_ref.mean(0)) / sigma_b
    (x_hat * r * target).sum().backward()
    assert x.grad is not None and x_ref.grad is not None
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-10)


def test_warmup_counts_training_passes_only():
    renorm = BatchRenorm(F_, warmup_steps=2)
    (x,) = batches(1)
    renorm.eval()
    renorm(x)
    assert int(renorm.steps) == 0
    renorm.train()
    plain = nn.BatchNorm1d(F_, eps=1e-3)
    assert torch.allclose(renorm(x), plain(x), atol=1e-5)
    assert torch.allclose(renorm(x), plain(x), atol=1e-5)
    assert int(renorm.steps) == 2
    # Third training pass: renormalised against running stats that are still far from x's.
    assert not torch.allclose(renorm(x), plain(x), atol=1e-3)
    assert int(renorm.steps) == 3


def test_steps_and_running_stats_are_in_the_state_dict_and_round_trip():
    renorm = BatchRenorm(F_, momentum=0.2, warmup_steps=3)
    for x in batches(4):
        renorm(x)
    state = renorm.state_dict()
    assert set(state) == {"weight", "bias", "running_mean", "running_var", "steps"}
    assert state["steps"].dtype == torch.int64 and int(state["steps"]) == 4
    restored = BatchRenorm(F_, momentum=0.2, warmup_steps=3)
    restored.load_state_dict(state)
    assert int(restored.steps) == 4
    assert torch.equal(restored.running_mean, renorm.running_mean)
    assert torch.equal(restored.running_var, renorm.running_var)
    (x,) = batches(1, seed=9)
    assert torch.equal(restored(x), renorm(x))  # continues past warm-up identically


def test_initial_running_stats_are_mean_zero_var_one():
    renorm = BatchRenorm(F_, num_members=3)
    assert renorm.running_mean.shape == (3, 1, F_) and renorm.weight.shape == (3, 1, F_)
    assert torch.equal(renorm.running_mean, torch.zeros(3, 1, F_))
    assert torch.equal(renorm.running_var, torch.ones(3, 1, F_))


@pytest.mark.parametrize("warmup_steps", [100, 0])
def test_members_have_independent_statistics(warmup_steps: int):
    def run(x: torch.Tensor) -> tuple[torch.Tensor, BatchRenorm]:
        norm = BatchRenorm(F_, momentum=0.3, warmup_steps=warmup_steps, num_members=2)
        outputs = [norm(x) for _ in range(3)]
        return torch.stack(outputs), norm

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, B, F_, generator=generator)
    changed = x.clone()
    changed[0] = changed[0] * 5.0 + 3.0
    out, norm = run(x)
    out_changed, norm_changed = run(changed)
    assert torch.equal(out[:, 1], out_changed[:, 1])
    assert torch.equal(norm.running_mean[1], norm_changed.running_mean[1])
    assert not torch.allclose(norm.running_mean[0], norm_changed.running_mean[0])
    # And each member equals a single-member layer run on its own inputs.
    single = BatchRenorm(F_, momentum=0.3, warmup_steps=warmup_steps)
    alone = torch.stack([single(changed[0]) for _ in range(3)])
    assert torch.allclose(out_changed[:, 0], alone, atol=1e-6)


def test_bad_input_shape_is_refused_with_the_expected_shape():
    with pytest.raises(ValueError, match=r"expects input \[K, B, F\]"):
        BatchRenorm(F_, num_members=2)(torch.randn(B, F_))
    with pytest.raises(ValueError, match="batch of >= 2"):
        BatchRenorm(F_)(torch.randn(1, F_))
