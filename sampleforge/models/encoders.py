"""Observation encoders: turn a dict of observation tensors into one feature vector per sample.

Responsible for: the MLP encoder for vector observations, the Sample Factory "simplified" conv
encoder for images, the multi-input encoder for Dict observations, and ``make_encoder`` which
picks among them from the observation specs.

Must not: normalise observations (that is ``RunningMeanStd``'s job, applied by the
actor-critic), hold recurrent state, produce actions/values, or move data between devices
beyond casting inputs that already live on the model's device.

Image rules (``is_image_spec`` / ``image_layout``):
  * an observation is image-like when it is uint8 and 3-D;
  * it is channels-first ``[C, H, W]`` unless its last dim is in (1, 3, 4) *and* its first dim
    is larger than the last one, in which case it is channels-last ``[H, W, C]`` and the conv
    encoder permutes it inside ``forward``;
  * uint8 pixels stay uint8 until ``forward``, where they are converted to float and divided by
    255 on whatever device the input lives on (so host->device copies move 1 byte/pixel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from sampleforge.spaces import TensorSpec

ENCODER_NAMES = ("auto", "mlp", "conv_simple", "conv_nature")
_ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
_HIDDEN_GAIN = math.sqrt(2.0)

# (out_channels, kernel, stride) of each conv encoder: Sample Factory's "simplified" one (the
# paper's), and the DQN Nature network (Mnih et al. 2015), which CleanRL's ppo_atari and Sample
# Factory's Atari example use: its last layer keeps 7x7 of an 84x84 frame instead of 4x4.
_CONV_LAYERS = {"conv_simple": ((32, 8, 4), (64, 4, 2), (128, 3, 2)),
                "conv_nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1))}
_CONV_FC_SIZE = 512
# Largest float input a conv pass takes at once. Every activation of a chunk then stays under
# glibc's mmap threshold (32 MB at most), so freed activations are reused from the heap. A whole
# Atari batch of 1,024 (115 MB as floats) would be mapped, page-faulted and unmapped at every SGD
# step: the learner spent a third of its time in the kernel (1,254 us per sample on one core;
# 778 us in chunks of 128).
_CONV_CHUNK_BYTES = 16 << 20


def make_activation(name: str) -> nn.Module:
    """A fresh activation module by name: one of "elu", "relu", "tanh"."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; allowed: {', '.join(sorted(_ACTIVATIONS))}"
        ) from None


def _orthogonal_init(layer: nn.Module, gain: float) -> None:
    # Orthogonal weights keep activations well-scaled at init; zero bias avoids an initial skew.
    nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def is_image_spec(spec: TensorSpec) -> bool:
    """True for uint8 3-D observations (the ones the conv encoder handles)."""
    return spec.dtype == torch.uint8 and len(spec.shape) == 3


def image_layout(shape: Sequence[int]) -> str:
    """Memory layout of a 3-D image observation: "HWC" or "CHW".

    "HWC" if the last dim looks like channels (1, 3 or 4) and the first dim is larger, else
    "CHW". shape: the observation shape without batch dims.
    """
    if len(shape) != 3:
        raise ValueError(f"image observations must be 3-D, got shape {tuple(shape)}")
    if shape[-1] in (1, 3, 4) and shape[0] > shape[-1]:
        return "HWC"
    return "CHW"


class MlpEncoder(nn.Module):
    """Fully connected encoder. forward(x: [B, *dims]) -> [B, out_size] (inputs flattened)."""

    def __init__(
        self, in_dim: int, hidden_sizes: Sequence[int] = (64, 64), activation: str = "elu"
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = int(in_dim)
        for hidden in hidden_sizes:
            linear = nn.Linear(size, int(hidden))
            _orthogonal_init(linear, _HIDDEN_GAIN)
            layers += [linear, make_activation(activation)]
            size = int(hidden)
        self.net = nn.Sequential(*layers)
        self.in_dim = int(in_dim)
        self.out_size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float() also accepts uint8/bool vectors (e.g. RAM observations) without scaling them.
        return self.net(x.flatten(1).float())


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class ConvEncoder(nn.Module):
    """Three conv layers -> flatten -> fc 512, an activation after every layer.

    ``conv_simple`` (Sample Factory's "simplified"): 8x8/4 (32) -> 4x4/2 (64) -> 3x3/2 (128).
    ``conv_nature`` (DQN Nature): 8x8/4 (32) -> 4x4/2 (64) -> 3x3/1 (64).
    obs_shape is the 3-D observation shape (CHW or HWC, see ``image_layout``).
    forward(x: uint8 [B, *obs_shape]) -> [B, out_size]. uint8 input is scaled to [0, 1]; float
    input is used as is.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        activation: str = "elu",
        fc_size: int = _CONV_FC_SIZE,
        architecture: str = "conv_simple",
    ) -> None:
        super().__init__()
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.channels_last = image_layout(self.obs_shape) == "HWC"
        if self.channels_last:
            height, width, channels = self.obs_shape
        else:
            channels, height, width = self.obs_shape
        layers: list[nn.Module] = []
        for out_ch, kernel, stride in _CONV_LAYERS[architecture]:
            conv = nn.Conv2d(channels, out_ch, kernel_size=kernel, stride=stride)
            _orthogonal_init(conv, _HIDDEN_GAIN)
            layers += [conv, make_activation(activation)]
            channels = out_ch
            height, width = _conv_out(height, kernel, stride), _conv_out(width, kernel, stride)
        if height < 1 or width < 1:
            raise ValueError(
                f"image {self.obs_shape} is too small for the {architecture} encoder "
                "(needs height and width >= 36)"
            )
        self.convs = nn.Sequential(*layers)
        fc = nn.Linear(channels * height * width, int(fc_size))
        _orthogonal_init(fc, _HIDDEN_GAIN)
        self.fc = nn.Sequential(fc, make_activation(activation))
        self.out_size = int(fc_size)
        self.chunk_size = max(1, _CONV_CHUNK_BYTES // (4 * _flat_size(self.obs_shape)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.chunk_size:
            return self._encode(x)
        return torch.cat([self._encode(chunk) for chunk in x.split(self.chunk_size)])

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if x.dtype == torch.uint8:
            # Scale here, on the input's device, so transfers stay at 1 byte per pixel.
            x = x.float().mul_(1.0 / 255.0)
        else:
            x = x.float()
        return self.fc(self.convs(x).flatten(1))


def _flat_size(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


class SingleInputEncoder(nn.Module):
    """Adapts a tensor encoder to the dict interface: forward(obs dict) -> encoder(obs[key])."""

    def __init__(self, key: str, encoder: nn.Module) -> None:
        super().__init__()
        self.key = key
        self.encoder = encoder
        self.out_size = int(encoder.out_size)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.encoder(obs[self.key])


class MultiInputEncoder(nn.Module):
    """Encoder for Dict observations.

    Each image-like key (see ``is_image_spec``) gets its own ``ConvEncoder``; all other keys are
    flattened, concatenated and fed to one ``MlpEncoder``. Their outputs are concatenated and
    passed through a linear layer + activation.
    forward(obs: {key: [B, ...]}) -> [B, out_size]. ``out_size`` defaults to 512 when there is an
    image key, else to the last MLP hidden size. ``use_conv=False`` treats every key as a vector.
    """

    def __init__(
        self,
        obs_specs: Mapping[str, TensorSpec],
        mlp_hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "elu",
        out_size: int | None = None,
        use_conv: bool = True,
        conv: str = "conv_simple",
    ) -> None:
        super().__init__()
        keys = sorted(obs_specs)
        self.image_keys = [k for k in keys if use_conv and is_image_spec(obs_specs[k])]
        self.vector_keys = [k for k in keys if k not in self.image_keys]
        # A ModuleList aligned with image_keys (not a ModuleDict) so keys containing "." work.
        self.convs = nn.ModuleList(
            [ConvEncoder(obs_specs[k].shape, activation, architecture=conv)
             for k in self.image_keys]
        )
        concat_size = sum(conv.out_size for conv in self.convs)
        self.mlp: MlpEncoder | None = None
        if self.vector_keys:
            in_dim = sum(_flat_size(obs_specs[k].shape) for k in self.vector_keys)
            self.mlp = MlpEncoder(in_dim, mlp_hidden_sizes, activation)
            concat_size += self.mlp.out_size
        if out_size is None:
            out_size = _CONV_FC_SIZE if self.image_keys else self.mlp.out_size
        linear = nn.Linear(concat_size, int(out_size))
        _orthogonal_init(linear, _HIDDEN_GAIN)
        self.head = nn.Sequential(linear, make_activation(activation))
        self.out_size = int(out_size)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts = [conv(obs[k]) for k, conv in zip(self.image_keys, self.convs)]
        if self.mlp is not None:
            vectors = [obs[k].flatten(1).float() for k in self.vector_keys]
            parts.append(self.mlp(torch.cat(vectors, dim=1)))
        return self.head(torch.cat(parts, dim=1))


def make_encoder(
    obs_specs: Mapping[str, TensorSpec],
    encoder: str = "auto",
    mlp_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "elu",
) -> nn.Module:
    """Build the encoder for these observation specs.

    Returns a module with ``out_size`` whose forward takes the observation dict
    ``{key: [B, ...]}`` and returns features [B, out_size].
    encoder: "auto" (conv for one 3-D uint8 image, MLP for one vector, multi-input for several
    keys; the conv is conv_simple), "mlp" (everything flattened through an MLP), "conv_simple"
    or "conv_nature" (that conv encoder; the observation must be 3-D; with several keys, conv
    for image keys and MLP for the rest).
    """
    if encoder not in ENCODER_NAMES:
        raise ValueError(f"unknown encoder {encoder!r}; allowed: {', '.join(ENCODER_NAMES)}")
    if not obs_specs:
        raise ValueError("make_encoder needs at least one observation key")
    conv = encoder if encoder in _CONV_LAYERS else "conv_simple"
    if len(obs_specs) > 1:
        return MultiInputEncoder(obs_specs, mlp_hidden_sizes, activation,
                                 use_conv=encoder != "mlp", conv=conv)
    ((key, spec),) = obs_specs.items()
    use_conv = (encoder == "auto" and is_image_spec(spec)) or encoder in _CONV_LAYERS
    if use_conv:
        if len(spec.shape) != 3:
            raise ValueError(f"encoder {conv!r} needs 3-D observations, got {spec.shape}")
        return SingleInputEncoder(key, ConvEncoder(spec.shape, activation, architecture=conv))
    return SingleInputEncoder(key, MlpEncoder(_flat_size(spec.shape), mlp_hidden_sizes, activation))
