"""Observation encoders: turn a dict of observation tensors into one feature vector per sample.

Responsible for: the MLP encoder for vector observations, the one-hot encoding of discrete
observations (``OneHot``), the Sample Factory "simplified" and DQN Nature conv encoders and
IMPALA's residual network for images, the multi-input encoder for Dict observations,
registering them as the built-in encoders (``registry.py``), ``make_encoder``, which builds any
registered encoder by name, and ``encode``, which runs one in a lower precision (the learner's
``learner_precision``).

Must not: normalise observations (that is ``RunningMeanStd``'s job, applied by the
actor-critic), hold recurrent state, produce actions/values, or move data between devices
beyond casting inputs that already live on the model's device.

Image rules (``is_image_spec`` / ``image_layout``):
  * an observation is image-like when it is uint8 and 3-D;
  * it is channels-first ``[C, H, W]`` unless its last dim is in (1, 3, 4) *and* its first dim
    is larger than the last one, in which case it is channels-last ``[H, W, C]`` and the conv
    encoder permutes it inside ``forward``;
  * uint8 pixels stay uint8 until ``forward``, where they are converted to float and divided by
    255 on whatever device the input lives on (so host->device copies move 1 byte/pixel);
    float images (``normalize_pixels``: the actor-critic has already normalised them) are used
    as they are.

Discrete rules: a spec with ``categories`` (a Discrete or MultiDiscrete observation, stored as
zero-based integer indices; see ``sampleforge.spaces``) is one-hot encoded inside ``forward``,
on the input's device, one block per element, concatenated (as Stable-Baselines3 and RLlib do);
MultiBinary bits (int8) are used as 0/1 floats. Both then go through the MLP with the vectors.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import cast

import torch
from torch import nn

from sampleforge.models.init_schemes import orthogonal_init
from sampleforge.models.registry import EncoderSettings, _register, build_encoder
from sampleforge.spaces import TensorSpec

# The built-in encoders, registered at the end of this module.
ENCODER_NAMES = ("auto", "mlp", "conv_simple", "conv_nature", "resnet")
_ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
_HIDDEN_GAIN = math.sqrt(2.0)

# (out_channels, kernel, stride) of each conv encoder: Sample Factory's "simplified" one (the
# paper's), and the DQN Nature network (Mnih et al. 2015), which CleanRL's ppo_atari and Sample
# Factory's Atari example use: its last layer keeps 7x7 of an 84x84 frame instead of 4x4.
_CONV_LAYERS = {
    "conv_simple": ((32, 8, 4), (64, 4, 2), (128, 3, 2)),
    "conv_nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
}
_CONV_FC_SIZE = 512
# IMPALA's "large" network (Espeholt et al. 2018, section 4 and figure 3): the output channels
# of its three stages, and the size of the linear layer after them.
_RESNET_CHANNELS = (16, 32, 32)
_RESNET_FC_SIZE = 256
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


class Encoder(nn.Module):
    """What every encoder offers: forward(observations) -> features [B, out_size]. A user's
    registered module need not subclass it, only have an int ``out_size`` (the registry checks)."""

    out_size: int


class OneHot(nn.Module):
    """Category indices -> one-hot features, computed where the indices live.

    categories: the number of categories of each element (``TensorSpec.categories``).
    forward(x: integer [B, *shape], zero-based, prod(shape) == len(categories)) -> float
    [B, sum(categories)]: element i's one-hot in its own block, blocks in row-major order.
    Indices must lie in range (``spaces.observation_to_dict`` checks what envs return).
    """

    offsets: torch.Tensor

    def __init__(self, categories: Sequence[int]) -> None:
        super().__init__()
        self.categories = tuple(int(n) for n in categories)
        self.out_size = sum(self.categories)
        starts = [sum(self.categories[:i]) for i in range(len(self.categories))]
        # Not persistent: derived from the space, so checkpoints stay free of it.
        self.register_buffer("offsets", torch.tensor(starts, dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = x.reshape(x.shape[0], -1).long() + self.offsets
        one_hot = torch.zeros(x.shape[0], self.out_size, device=x.device)
        return one_hot.scatter_(1, index, 1.0)

    def extra_repr(self) -> str:
        return f"categories={self.categories}"


class VectorInput(nn.Module):
    """One non-image observation key as float features: forward(x: [B, *shape]) -> [B, size].

    Discrete parts (``spec.categories``) are one-hot encoded; everything else is flattened and
    cast to float (MultiBinary bits stay 0/1; uint8 vectors are not scaled unless
    ``scale_pixels``, which divides uint8 input by 255 as the image encoders do).
    """

    def __init__(self, spec: TensorSpec, scale_pixels: bool = False) -> None:
        super().__init__()
        self.one_hot = None if spec.categories is None else OneHot(spec.categories)
        self.size = _flat_size(spec.shape) if self.one_hot is None else self.one_hot.out_size
        self.scale_pixels = bool(scale_pixels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.one_hot is not None:
            return self.one_hot(x)
        flat = x.reshape(x.shape[0], -1)
        if self.scale_pixels and flat.dtype == torch.uint8:
            return flat.float().mul_(1.0 / 255.0)
        return flat.float()


class MlpEncoder(Encoder):
    """Fully connected encoder. forward(x: [B, *dims]) -> [B, out_size] (inputs flattened)."""

    def __init__(
        self, in_dim: int, hidden_sizes: Sequence[int] = (64, 64), activation: str = "elu"
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = int(in_dim)
        for hidden in hidden_sizes:
            linear = nn.Linear(size, int(hidden))
            orthogonal_init(linear, _HIDDEN_GAIN)
            layers += [linear, make_activation(activation)]
            size = int(hidden)
        self.net = nn.Sequential(*layers)
        self.in_dim = int(in_dim)
        self.out_size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float() also accepts uint8/bool vectors (e.g. RAM observations) without scaling them;
        # reshape, not flatten(1), so that a Box of shape () (one number, [B]) is [B, 1].
        return self.net(x.reshape(x.shape[0], -1).float())


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class ConvEncoder(Encoder):
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
            orthogonal_init(conv, _HIDDEN_GAIN)
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
        orthogonal_init(fc, _HIDDEN_GAIN)
        self.fc = nn.Sequential(fc, make_activation(activation))
        self.out_size = int(fc_size)
        self.chunk_size = max(1, _CONV_CHUNK_BYTES // (4 * _flat_size(self.obs_shape)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.chunk_size:
            return self._encode(x)
        return torch.cat([self._encode(chunk) for chunk in x.split(self.chunk_size)])

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        # Scaled here, on the input's device, so transfers stay at 1 byte per pixel.
        return self.fc(self.convs(_conv_input(_to_float_chw(x, self.channels_last))).flatten(1))


def _flat_size(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def _image_size(obs_shape: tuple[int, ...]) -> tuple[bool, int, int, int]:
    """(channels_last, channels, height, width) of a 3-D image shape (see image_layout)."""
    if image_layout(obs_shape) == "HWC":
        height, width, channels = obs_shape
        return True, channels, height, width
    channels, height, width = obs_shape
    return False, channels, height, width


def _to_float_chw(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """Images [B, *obs_shape] -> float [B, C, H, W]; uint8 is scaled to [0, 1] on x's device,
    float (already normalised pixels) is used as it is."""
    if channels_last:
        x = x.permute(0, 3, 1, 2)
    if x.dtype == torch.uint8:
        return x.float().mul_(1.0 / 255.0)
    return x.float()


def _conv_input(x: torch.Tensor) -> torch.Tensor:
    """x in the memory layout that makes the CPU's conv layers fastest for this pass.

    With gradients on (the learner), oneDNN's NHWC kernels train the Nature network on 84x84x4
    in about two thirds of the time of NCHW (485 against 739 us per sample, one thread, batch
    256); without them (inference on batches of 16-64) NCHW is the faster one (143-180 against
    170-200 us). Only measured on CPUs, so other devices keep the layout they are given.
    """
    if x.device.type == "cpu" and torch.is_grad_enabled():
        return x.contiguous(memory_format=torch.channels_last)
    return x


class ResidualBlock(nn.Module):
    """x + conv3x3(relu(conv3x3(relu(x)))): channels and size are kept."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Not in place: x is still needed for the skip connection.
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ResnetStage(nn.Module):
    """conv3x3 -> max pool 3x3 stride 2 -> two residual blocks. Halves height and width
    (rounding up, as the paper's "same" padding does): 84 -> 42 -> 21 -> 11."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.blocks = nn.Sequential(ResidualBlock(out_channels), ResidualBlock(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.pool(self.conv(x)))


class ResnetEncoder(Encoder):
    """IMPALA's residual network ("large" architecture, Espeholt et al. 2018, figure 3).

    Three stages of 16, 32 and 32 channels (``ResnetStage``), then ReLU -> flatten -> linear
    256 -> ReLU: 15 layers deep, 1.09M parameters on 84x84x4 frames. ReLU throughout, as in the
    paper (the ``activation`` setting does not apply). The convolutions keep PyTorch's default
    initialisation (so each residual branch starts small); the linear layer is orthogonal, as
    in the other encoders. obs_shape is the 3-D observation shape (CHW or HWC, see
    ``image_layout``). forward(x: [B, *obs_shape]) -> [B, 256]; uint8 input is scaled to
    [0, 1], float input is used as it is.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        channels: Sequence[int] = _RESNET_CHANNELS,
        fc_size: int = _RESNET_FC_SIZE,
    ) -> None:
        super().__init__()
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.channels_last, in_channels, height, width = _image_size(self.obs_shape)
        stages = []
        largest = 0  # floats per sample of the largest activation
        for out_channels in channels:
            stages.append(ResnetStage(in_channels, int(out_channels)))
            largest = max(largest, int(out_channels) * height * width)
            in_channels = int(out_channels)
            height, width = (height + 1) // 2, (width + 1) // 2
        self.stages = nn.Sequential(*stages)
        fc = nn.Linear(in_channels * height * width, int(fc_size))
        orthogonal_init(fc, _HIDDEN_GAIN)
        self.fc = fc
        self.out_size = int(fc_size)
        # On the CPU, batches run in chunks whose activations each stay under the same bound
        # as the conv encoders' (see _CONV_CHUNK_BYTES): here the largest activation is the
        # first stage's, four times the input's size on 4-channel frames.
        self.chunk_size = max(1, _CONV_CHUNK_BYTES // (4 * largest))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.shape[0] <= self.chunk_size:
            return self._encode(x)
        return torch.cat([self._encode(chunk) for chunk in x.split(self.chunk_size)])

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.stages(_to_float_chw(x, self.channels_last)))
        return torch.relu(self.fc(features.flatten(1)))


def _fits_conv(obs_shape: Sequence[int], architecture: str) -> bool:
    """Whether the image encoder ``architecture`` takes images of this 3-D shape (the conv
    encoders' strided layers need 36x36 at least; the residual network takes any size)."""
    if architecture not in _CONV_LAYERS:
        return True
    _, _, height, width = _image_size(tuple(int(d) for d in obs_shape))
    for _, kernel, stride in _CONV_LAYERS[architecture]:
        height, width = _conv_out(height, kernel, stride), _conv_out(width, kernel, stride)
    return height >= 1 and width >= 1


def _image_encoder(obs_shape: Sequence[int], activation: str, architecture: str) -> Encoder:
    """The image encoder of one 3-D observation: conv_simple, conv_nature or resnet."""
    if architecture == "resnet":
        return ResnetEncoder(obs_shape)
    return ConvEncoder(obs_shape, activation, architecture=architecture)


class SingleInputEncoder(Encoder):
    """Adapts a tensor encoder to the dict interface: forward(obs dict) -> encoder(obs[key]),
    or encoder(inputs(obs[key])) with an ``inputs`` module (the one-hot of a discrete key)."""

    def __init__(self, key: str, encoder: Encoder, inputs: nn.Module | None = None) -> None:
        super().__init__()
        self.key = key
        self.inputs = inputs
        self.encoder = encoder
        self.out_size = int(encoder.out_size)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        x = obs[self.key]
        return self.encoder(x if self.inputs is None else self.inputs(x))


class MultiInputEncoder(Encoder):
    """Encoder for Dict observations.

    Each image-like key (see ``is_image_spec``) gets its own image encoder (``conv``:
    conv_simple, conv_nature or resnet); all other keys are
    flattened (discrete keys one-hot encoded; see ``VectorInput``), concatenated and fed to one
    ``MlpEncoder``. Their outputs are concatenated and
    passed through a linear layer + activation.
    forward(obs: {key: [B, ...]}) -> [B, out_size]. ``out_size`` defaults to 512 when there is an
    image key, else to the last MLP hidden size. ``use_conv=False`` treats every key as a vector.
    ``small_images_to_mlp`` (the "auto" encoder) sends images too small for ``conv`` (a
    MiniGrid view of 7x7x3, say) to the MLP, scaled to [0, 1], instead of failing.
    """

    def __init__(
        self,
        obs_specs: Mapping[str, TensorSpec],
        mlp_hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "elu",
        out_size: int | None = None,
        use_conv: bool = True,
        conv: str = "conv_simple",
        small_images_to_mlp: bool = False,
    ) -> None:
        super().__init__()
        keys = sorted(obs_specs)
        images = [k for k in keys if use_conv and is_image_spec(obs_specs[k])]
        self.image_keys = [
            k for k in images if not small_images_to_mlp or _fits_conv(obs_specs[k].shape, conv)
        ]
        self.vector_keys = [k for k in keys if k not in self.image_keys]
        # A ModuleList aligned with image_keys (not a ModuleDict) so keys containing "." work.
        self.convs = nn.ModuleList(
            [_image_encoder(obs_specs[k].shape, activation, conv) for k in self.image_keys]
        )
        concat_size = sum(int(cast(Encoder, conv).out_size) for conv in self.convs)
        # Parameter-free, so the state dict of a model without discrete keys is unchanged.
        self.vector_inputs = nn.ModuleList(
            [VectorInput(obs_specs[k], scale_pixels=k in images) for k in self.vector_keys]
        )
        self.mlp: MlpEncoder | None = None
        if self.vector_keys:
            in_dim = sum(cast(VectorInput, v).size for v in self.vector_inputs)
            self.mlp = MlpEncoder(in_dim, mlp_hidden_sizes, activation)
            concat_size += self.mlp.out_size
        if out_size is None:
            out_size = _CONV_FC_SIZE if self.image_keys or self.mlp is None else self.mlp.out_size
        linear = nn.Linear(concat_size, int(out_size))
        orthogonal_init(linear, _HIDDEN_GAIN)
        self.head = nn.Sequential(linear, make_activation(activation))
        self.out_size = int(out_size)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts = [conv(obs[k]) for k, conv in zip(self.image_keys, self.convs)]
        if self.mlp is not None:
            vectors = [vector(obs[k]) for k, vector in zip(self.vector_keys, self.vector_inputs)]
            parts.append(self.mlp(torch.cat(vectors, dim=1)))
        return self.head(torch.cat(parts, dim=1))


def make_encoder(
    obs_specs: Mapping[str, TensorSpec],
    encoder: str = "auto",
    mlp_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "elu",
) -> Encoder:
    """Build the encoder ``encoder`` (any registered name, or module:name; see
    ``registry.py``) for these observation specs.

    Returns a module with ``out_size`` whose forward takes the observation dict
    ``{key: [B, ...]}`` and returns features [B, out_size]. Raises UnknownEncoderError (a
    one-line ConfigError) for a name that is not registered.
    """
    settings = EncoderSettings(tuple(int(h) for h in mlp_hidden_sizes), activation)
    # A user's module may not subclass Encoder; build_encoder checked its int out_size.
    return cast(Encoder, build_encoder(encoder, obs_specs, settings))


def encode(
    encoder: nn.Module,
    obs: Mapping[str, torch.Tensor],
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``encoder(obs)``. With a ``compute_dtype`` (bfloat16, the learner's
    ``learner_precision``) its convolutions and matrix products run in that dtype under
    ``torch.autocast`` and the features come back float32: what is built on them (cores, heads,
    losses) keeps float32's precision, as bfloat16's 8-bit significand would quantise Q-values
    and log-probabilities."""
    if compute_dtype is None:
        return cast(torch.Tensor, encoder(obs))
    device_type = next(iter(obs.values())).device.type
    with torch.autocast(device_type, dtype=compute_dtype):
        features = encoder(obs)
    return cast(torch.Tensor, features).float()


def _builtin_encoder(
    obs_specs: Mapping[str, TensorSpec], settings: EncoderSettings, *, name: str
) -> nn.Module:
    """The built-in encoder ``name``.

    "auto": conv_simple for one 3-D uint8 image, MLP for one vector (discrete observations
    one-hot encoded first) or for an image smaller than conv_simple takes, multi-input for
    several keys. "mlp": everything flattened through an MLP. "conv_simple", "conv_nature", "resnet":
    that image encoder; the observation must be 3-D; with several keys, that encoder for each
    image key and an MLP for the rest.
    """
    hidden, activation = settings.mlp_hidden_sizes, settings.activation
    image = name if name in _IMAGE_ENCODERS else "conv_simple"
    auto = name == "auto"
    if len(obs_specs) > 1:
        return MultiInputEncoder(
            obs_specs,
            hidden,
            activation,
            use_conv=name != "mlp",
            conv=image,
            small_images_to_mlp=auto,
        )
    ((key, spec),) = obs_specs.items()
    small_image = auto and is_image_spec(spec) and not _fits_conv(spec.shape, image)
    if (auto and is_image_spec(spec) and not small_image) or name in _IMAGE_ENCODERS:
        if len(spec.shape) != 3:
            raise ValueError(f"encoder {image!r} needs 3-D observations, got {spec.shape}")
        return SingleInputEncoder(key, _image_encoder(spec.shape, activation, image))
    if spec.categories is not None or small_image:
        inputs = VectorInput(spec, scale_pixels=small_image)
        return SingleInputEncoder(key, MlpEncoder(inputs.size, hidden, activation), inputs)
    return SingleInputEncoder(key, MlpEncoder(_flat_size(spec.shape), hidden, activation))


_IMAGE_ENCODERS = ("conv_simple", "conv_nature", "resnet")
_DESCRIPTIONS = {
    "auto": "by observation shape: conv_simple for one image (mlp if under 36x36), mlp for one "
    "vector (discrete ones one-hot), both for a Dict",
    "mlp": "every observation key flattened through one MLP (mlp_hidden_sizes, activation)",
    "conv_simple": "Sample Factory's simplified conv encoder: 3 conv layers + fc 512",
    "conv_nature": "the DQN Nature network (Mnih et al. 2015): 3 conv layers + fc 512",
    "resnet": "IMPALA's residual network (Espeholt et al. 2018): 15 layers + fc 256",
}
for _name in ENCODER_NAMES:
    _register(
        _name,
        functools.partial(_builtin_encoder, name=_name),
        description=_DESCRIPTIONS[_name],
        overwrite=False,
        builtin=True,
    )
