"""How a new network's weights start: the initialisation schemes `init_scheme` names.

- ``ppo``: orthogonal weights with gain sqrt(2) for hidden layers, 0.01 for the policy head
  (an almost uniform first policy) and 1 for the value head, zero biases (Andrychowicz et al.
  2021, "What matters in on-policy RL"; CleanRL's PPO scripts). The layers set these themselves
  as they are built (the resnet encoder's convolutions keep PyTorch's default), so this scheme
  changes nothing afterwards.
- ``unit``: orthogonal weights with gain 1 for every linear and conv layer, zero biases: Sample
  Factory's default (``policy_initialization=orthogonal``, ``policy_init_gain=1``). The first
  policy is far from uniform, and on Breakout it learns in fewer frames (docs/benchmarks.md).
  Recurrent cores keep their own initialisation; a custom encoder's linear and conv layers are
  re-initialised too.
- ``unit_uniform``: ``unit``, except the policy head, which keeps ``ppo``'s gain of 0.01, so
  the first policy is almost uniform. On Breakout it learns as early as ``unit``; on Pong, where
  ``unit``'s skewed first policy costs it frames, as early as ``ppo`` (docs/benchmarks.md).

Must not: change which parameters exist (checkpoints do not depend on the scheme).
"""

from __future__ import annotations

from torch import nn

INIT_SCHEMES = ("ppo", "unit", "unit_uniform")
# A small policy head makes the first policy close to uniform (or zero-mean), which explores.
POLICY_HEAD_GAIN = 0.01


def orthogonal_init(layer: nn.Linear | nn.Conv2d, gain: float) -> None:
    """Orthogonal weights of `gain` (activations stay well-scaled) and zero biases (no skew)."""
    nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def apply_init_scheme(model: nn.Module, scheme: str) -> None:
    """Re-initialise the freshly built `model` as `scheme` (one of INIT_SCHEMES) says."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init_scheme {scheme!r}; allowed: {', '.join(INIT_SCHEMES)}")
    if scheme in ("unit", "unit_uniform"):
        for layer in model.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                orthogonal_init(layer, gain=1.0)
    if scheme == "unit_uniform":
        for layer in model.get_submodule("action_head").modules():
            if isinstance(layer, nn.Linear):
                orthogonal_init(layer, POLICY_HEAD_GAIN)
