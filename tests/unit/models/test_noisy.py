"""NoisyLinear (models/noisy.py): the factorised noise and initialisation of Fortunato et al.
2018, noise only in training mode, and a deterministic mean-weight layer in eval and export."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sampleforge.models.noisy import (
    FACTORISED_SIGMA_0,
    NoisyLinear,
    factorised_noise_scale,
    reset_noise,
    set_noise_enabled,
)

IN, OUT = 7, 5


def layer(seed: int = 0) -> NoisyLinear:
    torch.manual_seed(seed)
    return NoisyLinear(IN, OUT)


def mean_linear(noisy: NoisyLinear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, noisy.weight_mu, noisy.bias_mu)


def test_noise_scale_is_sign_times_square_root_of_magnitude():
    x = torch.tensor([-4.0, -0.25, 0.0, 0.25, 9.0])
    expected = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0])
    assert torch.equal(factorised_noise_scale(x), expected)


def test_initialisation_is_the_papers_factorised_one():
    big = NoisyLinear(400, 300)
    bound = 1 / math.sqrt(400)
    assert FACTORISED_SIGMA_0 == 0.5
    for mu in (big.weight_mu, big.bias_mu):
        assert mu.abs().max() <= bound
        assert mu.abs().max() > 0.9 * bound  # uniform over the whole interval
    for sigma in (big.weight_sigma, big.bias_sigma):
        assert torch.allclose(sigma, torch.full_like(sigma, 0.5 / math.sqrt(400)))


def test_noise_is_factorised_outer_product_of_scaled_unit_gaussians():
    """eq. 10-11: eps_w[j, i] = f(eps_j) f(eps_i), eps_b[j] = f(eps_j); p + q draws."""
    noisy = layer()
    noisy.reset_noise(torch.Generator().manual_seed(3))
    draws = torch.Generator().manual_seed(3)
    eps_in = factorised_noise_scale(torch.randn(IN, generator=draws))
    eps_out = factorised_noise_scale(torch.randn(OUT, generator=draws))
    assert torch.equal(noisy.weight_epsilon(), torch.outer(eps_out, eps_in))

    x = torch.randn(3, IN)
    weight = noisy.weight_mu + noisy.weight_sigma * torch.outer(eps_out, eps_in)
    bias = noisy.bias_mu + noisy.bias_sigma * eps_out
    assert torch.allclose(noisy(x), F.linear(x, weight, bias), atol=1e-6)


def test_train_mode_output_changes_when_noise_is_redrawn():
    noisy = layer().train()
    x = torch.randn(4, IN)
    before = noisy(x)
    assert torch.equal(noisy(x), before)  # the noise stays fixed between draws
    noisy.reset_noise()
    after = noisy(x)
    assert not torch.allclose(before, after)
    assert not torch.allclose(after, mean_linear(noisy, x))


def test_eval_mode_is_deterministic_and_equals_the_mean_weight_linear():
    noisy = layer().eval()
    x = torch.randn(4, IN)
    first = noisy(x)
    noisy.reset_noise()
    assert torch.equal(noisy(x), first)
    assert torch.equal(first, mean_linear(noisy, x))


def test_disabled_noise_uses_mean_weights_in_train_mode_too():
    model = nn.Sequential(layer(), nn.ReLU(), NoisyLinear(OUT, 2)).train()
    x = torch.randn(4, IN)
    set_noise_enabled(model, False)
    assert reset_noise(model) == 2
    quiet = model(x)
    expected = mean_linear(model[2], torch.relu(mean_linear(model[0], x)))
    assert torch.allclose(quiet, expected)
    set_noise_enabled(model, True)
    assert not torch.allclose(model(x), expected)


def test_sigma_learns_in_train_mode():
    noisy = layer().train()
    noisy(torch.randn(4, IN)).pow(2).sum().backward()
    assert noisy.weight_sigma.grad is not None and noisy.weight_sigma.grad.abs().sum() > 0
    assert noisy.bias_sigma.grad is not None and noisy.bias_sigma.grad.abs().sum() > 0


def test_noise_is_not_checkpointed_but_moves_with_the_module():
    noisy = layer()
    assert set(noisy.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}
    assert {name for name, _ in noisy.named_buffers()} == {"eps_in", "eps_out"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter, as export/
def test_exported_graph_is_the_mean_weight_linear():
    onnxruntime = pytest.importorskip("onnxruntime")
    noisy = layer().eval()
    x = torch.randn(4, IN)
    buffer = io.BytesIO()
    torch.onnx.export(noisy, (x,), buffer, input_names=["x"], dynamo=False)
    session = onnxruntime.InferenceSession(buffer.getvalue())
    (exported,) = session.run(None, {"x": x.numpy()})
    assert torch.allclose(torch.from_numpy(exported), mean_linear(noisy, x), atol=1e-6)


def test_bad_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="in_features and out_features >= 1; got 0 and 3") as e:
        NoisyLinear(0, 3)
    assert "\n" not in str(e.value)
