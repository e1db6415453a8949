"""LayerNorm in an encoder's hidden layers, as PQN uses it (Gallici et al. 2024).

Responsible for: ``add_layer_norm``, which inserts a LayerNorm between every hidden linear or
convolutional layer of a built encoder and the activation after it, and ``ChannelLayerNorm``,
the per-position LayerNorm over channels used after convolutions.

Which layers: PQN's networks (the paper's code, ``purejaxql``) apply
``Dense/Conv -> LayerNorm -> ReLU`` to every hidden layer: each hidden layer of the MLP, each
of the three Nature convolutions and the 512-unit dense layer; never the output layer that
produces Q-values. Flax's LayerNorm normalises the last axis, so after a convolution (NHWC)
it normalises the channels at each position; ``ChannelLayerNorm`` does the same on NCHW.

Must not: change encoders.py or how encoders are built for the actor-critic; it rewrites the
``nn.Sequential`` blocks of an already built encoder in place.
"""

from __future__ import annotations

import torch
from torch import nn

from sampleforge.models.encoders import ResnetEncoder

# The modules that end a hidden layer in the built-in encoders (make_activation's choices) and
# the usual others: a LayerNorm goes before them.
_ACTIVATIONS = (nn.ReLU, nn.ELU, nn.Tanh, nn.GELU, nn.SiLU, nn.LeakyReLU)


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of each position: x [B, C, H, W] -> [B, C, H, W], with a
    learned scale and shift per channel (as flax's LayerNorm on NHWC in PQN's conv net)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(int(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _norm_for(layer: nn.Module) -> nn.Module | None:
    if isinstance(layer, nn.Linear):
        return nn.LayerNorm(layer.out_features)
    if isinstance(layer, nn.Conv2d):
        return ChannelLayerNorm(layer.out_channels)
    return None


def add_layer_norm(encoder: nn.Module) -> int:
    """Insert a LayerNorm after every Linear or Conv2d that an activation follows inside an
    ``nn.Sequential`` of ``encoder`` (in place); returns how many were inserted.

    Covers the built-in "mlp", "conv_simple", "conv_nature" and "auto" encoders and Dict
    observations (each image encoder, the MLP and the merging layer). Raises ValueError for an
    encoder in which nothing would be normalised, and for IMPALA's residual network, whose
    layers are not ``Sequential`` blocks and would be left out.
    """
    if any(isinstance(m, ResnetEncoder) for m in encoder.modules()):
        raise ValueError(
            "layer_norm is not available for the resnet encoder; "
            "use mlp, conv_simple, conv_nature or auto"
        )
    inserted = 0
    for block in [m for m in encoder.modules() if isinstance(m, nn.Sequential)]:
        # From the end, so the indices still to visit do not shift.
        for index in range(len(block) - 2, -1, -1):
            norm = _norm_for(block[index])
            if norm is not None and isinstance(block[index + 1], _ACTIVATIONS):
                block.insert(index + 1, norm)
                inserted += 1
    if inserted == 0:
        raise ValueError(
            f"layer_norm found no Linear or Conv2d layer followed by an activation in "
            f"encoder {type(encoder).__name__}; use mlp, conv_simple, conv_nature or auto"
        )
    return inserted
