"""Noisy linear layers for exploration by parameter noise (NoisyNet, Fortunato et al. 2018).

Responsible for: ``NoisyLinear``, a linear layer whose weights and biases are perturbed by
factorised Gaussian noise (section 3.1, eq. 10-11), its initialisation (section 3.2), and
helpers that redraw or switch off the noise of every noisy layer of a model.

Must not: decide when noise is redrawn (the learner and the acting code call ``reset_noise``),
keep any randomness in the module's checkpointed state, or be noisy in eval mode: an eval-mode
(or exported) layer is the plain linear layer of its mean weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# sigma_0 of factorised NoisyNets (Fortunato et al. 2018, section 3.2).
FACTORISED_SIGMA_0 = 0.5


def factorised_noise_scale(x: torch.Tensor) -> torch.Tensor:
    """f(x) = sgn(x) sqrt(|x|), applied to each unit noise variable before the outer product
    (Fortunato et al. 2018, section 3.1). Any shape."""
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b (Fortunato et al. 2018, eq. 9),
    with factorised noise eps_w[j, i] = f(eps_out[j]) f(eps_in[i]), eps_b[j] = f(eps_out[j])
    (eq. 10-11): p + q unit Gaussians per draw instead of p * q.

    Initialisation (section 3.2, factorised case, p = in_features): mu ~ U[-1/sqrt(p),
    1/sqrt(p)] for weights and biases, sigma = sigma_0 / sqrt(p) for both.

    The noise is drawn by ``reset_noise`` and stays fixed between calls. It is used only while
    the module is in training mode *and* ``noise_enabled`` is True; otherwise forward is
    ``F.linear(x, weight_mu, bias_mu)``, deterministic and exportable. The noise lives in
    non-persistent buffers: it moves with ``.to(device)`` but is not part of ``state_dict``.

    forward(x: [..., in_features]) -> [..., out_features].
    """

    eps_in: torch.Tensor
    eps_out: torch.Tensor

    def __init__(
        self, in_features: int, out_features: int, sigma_0: float = FACTORISED_SIGMA_0
    ) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(
                f"NoisyLinear needs in_features and out_features >= 1; got "
                f"{in_features} and {out_features}"
            )
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.sigma_0 = float(sigma_0)
        self.noise_enabled = True
        self.weight_mu = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.weight_sigma = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.bias_mu = nn.Parameter(torch.empty(self.out_features))
        self.bias_sigma = nn.Parameter(torch.empty(self.out_features))
        self.register_buffer("eps_in", torch.zeros(self.in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(self.out_features), persistent=False)
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """The paper's factorised initialisation (section 3.2)."""
        bound = 1.0 / math.sqrt(self.in_features)
        sigma = self.sigma_0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(sigma)
            self.bias_sigma.fill_(sigma)

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise f(eps_in), f(eps_out) (on the layer's device; a
        ``generator`` must live there too)."""
        for eps in (self.eps_in, self.eps_out):
            unit = torch.randn(eps.shape, generator=generator, device=eps.device, dtype=eps.dtype)
            eps.copy_(factorised_noise_scale(unit))

    def weight_epsilon(self) -> torch.Tensor:
        """The current weight noise eps_w = f(eps_out) f(eps_in)^T: [out_features, in_features]."""
        return torch.outer(self.eps_out, self.eps_in)

    def noisy(self) -> bool:
        """Whether forward perturbs the weights now (training mode and noise enabled)."""
        return self.training and self.noise_enabled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.noisy():
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * self.weight_epsilon()
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"sigma_0={self.sigma_0}"
        )


def reset_noise(model: nn.Module, generator: torch.Generator | None = None) -> int:
    """Redraw the noise of every ``NoisyLinear`` in ``model``; returns how many there are."""
    layers = [m for m in model.modules() if isinstance(m, NoisyLinear)]
    for layer in layers:
        layer.reset_noise(generator)
    return len(layers)


def set_noise_enabled(model: nn.Module, enabled: bool) -> None:
    """Switch the noise of every ``NoisyLinear`` in ``model`` on or off (off: mean weights,
    also in training mode; e.g. a greedy evaluation that keeps the model in train mode)."""
    for layer in model.modules():
        if isinstance(layer, NoisyLinear):
            layer.noise_enabled = bool(enabled)
