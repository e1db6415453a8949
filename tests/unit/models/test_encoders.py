"""Unit tests for the observation encoders (IMPALA's residual network included) and
make_encoder."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.models.actor_critic import ActorCritic
from sampleforge.models.encoders import (
    ConvEncoder,
    MlpEncoder,
    MultiInputEncoder,
    ResnetEncoder,
    encode,
    image_layout,
    make_encoder,
)
from sampleforge.spaces import TensorSpec

IMAGE = TensorSpec((3, 40, 48), torch.uint8)
VECTOR = TensorSpec((6,), torch.float32)


def _random_obs(specs: dict[str, TensorSpec], batch: int) -> dict[str, torch.Tensor]:
    out = {}
    for key, spec in specs.items():
        if spec.dtype == torch.uint8:
            out[key] = torch.randint(0, 256, (batch, *spec.shape), dtype=torch.uint8)
        else:
            out[key] = torch.randn(batch, *spec.shape)
    return out


@pytest.mark.parametrize(
    ("specs", "encoder", "inner_type"),
    [
        ({"obs": VECTOR}, "auto", MlpEncoder),
        ({"obs": IMAGE}, "auto", ConvEncoder),
        ({"obs": IMAGE}, "mlp", MlpEncoder),
        ({"obs": TensorSpec((40, 40, 3), torch.float32)}, "conv_simple", ConvEncoder),
        ({"obs": IMAGE}, "resnet", ResnetEncoder),
        ({"img": IMAGE, "vec": VECTOR}, "resnet", MultiInputEncoder),
        ({"img": IMAGE, "vec": VECTOR}, "auto", MultiInputEncoder),
        ({"a": VECTOR, "b": TensorSpec((2, 3), torch.float32)}, "auto", MultiInputEncoder),
    ],
)
def test_make_encoder_picks_and_reports_out_size(specs, encoder, inner_type) -> None:
    module = make_encoder(specs, encoder, mlp_hidden_sizes=(32, 16))
    inner = getattr(module, "encoder", module)
    assert isinstance(inner, inner_type)
    features = module(_random_obs(specs, batch=3))
    assert features.shape == (3, module.out_size)
    assert features.dtype == torch.float32


def test_make_encoder_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="'resnet18'.*auto, conv_nature, conv_simple, mlp, resnet"):
        make_encoder({"obs": VECTOR}, "resnet18")
    with pytest.raises(ValueError, match="3-D"):
        make_encoder({"obs": VECTOR}, "conv_simple")
    with pytest.raises(ValueError, match="activation"):
        make_encoder({"obs": VECTOR}, activation="swish")


def test_mlp_encoder_sizes() -> None:
    enc = MlpEncoder(5, hidden_sizes=(8, 4), activation="relu")
    assert enc.out_size == 4
    assert enc(torch.randn(2, 5)).shape == (2, 4)
    assert MlpEncoder(5, hidden_sizes=()).out_size == 5


def test_a_box_of_shape_nothing_is_one_number_per_sample() -> None:
    # Box(low, high, ()) observations batch to [B]: flatten(1) refused them at the first act.
    specs = {"obs": TensorSpec((), torch.float32)}
    encoder = make_encoder(specs, "mlp", mlp_hidden_sizes=(8,), activation="relu")
    assert encoder({"obs": torch.randn(3)}).shape == (3, 8)


def test_conv_encoder_84x84_output_and_layers() -> None:
    enc = ConvEncoder((4, 84, 84))
    convs = [m for m in enc.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (128, (3, 3), (2, 2)),
    ]
    assert enc.out_size == 512
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert enc(x).shape == (2, 512)


def test_conv_nature_is_the_dqn_network_and_keeps_7x7() -> None:
    enc = make_encoder({"obs": TensorSpec((4, 84, 84), torch.uint8)}, "conv_nature").encoder
    convs = [m for m in enc.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    assert enc.fc[0].in_features == 64 * 7 * 7 and enc.out_size == 512
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert enc(x).shape == (2, 512)
    with pytest.raises(ValueError, match="conv_nature.*3-D"):
        make_encoder({"obs": VECTOR}, "conv_nature")


def test_conv_encoder_scales_uint8_inside_forward() -> None:
    enc = ConvEncoder((3, 40, 40))
    x = torch.randint(0, 256, (2, 3, 40, 40), dtype=torch.uint8)
    torch.testing.assert_close(enc(x), enc(x.float() / 255.0))


def test_image_layout_rule() -> None:
    assert image_layout((4, 84, 84)) == "CHW"
    assert image_layout((3, 72, 128)) == "CHW"
    assert image_layout((84, 84, 4)) == "HWC"
    assert image_layout((72, 128, 3)) == "HWC"
    assert image_layout((3, 3, 3)) == "CHW"  # ambiguous: channels-first wins


def test_hwc_images_are_transposed_inside_forward() -> None:
    chw = ConvEncoder((3, 40, 48))
    hwc = ConvEncoder((40, 48, 3))
    hwc.load_state_dict(chw.state_dict())  # same layer sizes, so weights are interchangeable
    x = torch.randint(0, 256, (2, 3, 40, 48), dtype=torch.uint8)
    torch.testing.assert_close(hwc(x.permute(0, 2, 3, 1)), chw(x))


def test_conv_encoder_rejects_too_small_images() -> None:
    with pytest.raises(ValueError, match="too small"):
        ConvEncoder((3, 20, 20))


def test_multi_input_encoder_uses_every_key() -> None:
    specs = {"img": IMAGE, "vec": VECTOR}
    enc = make_encoder(specs)
    assert enc.image_keys == ["img"] and enc.vector_keys == ["vec"]
    obs = _random_obs(specs, batch=2)
    base = enc(obs)
    for key in specs:
        changed = dict(obs)
        changed[key] = torch.zeros_like(obs[key])
        assert not torch.allclose(enc(changed), base), key


def test_conv_encoder_runs_large_batches_in_chunks_with_the_same_result() -> None:
    enc = ConvEncoder((4, 84, 84))
    # Every chunk's float input stays under the 16 MB that keeps activations off mmap.
    assert enc.chunk_size * 4 * 84 * 84 * 4 <= 16 << 20
    x = torch.randint(0, 256, (2 * enc.chunk_size + 3, 4, 84, 84), dtype=torch.uint8)
    chunked = enc(x)
    pieces = torch.cat([enc._encode(x[i : i + 7]) for i in range(0, len(x), 7)])
    torch.testing.assert_close(chunked, pieces)
    chunked.sum().backward()  # gradients flow through every chunk
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.parameters())


def _first_conv_input_layouts(enc: ConvEncoder, x: torch.Tensor) -> list[bool]:
    """Whether each input the first conv layer saw during enc(x) was channels_last."""
    seen: list[bool] = []
    hook = enc.convs[0].register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    try:
        enc(x)
    finally:
        hook.remove()
    return seen


def test_conv_encoder_trains_channels_last_on_the_cpu_and_infers_nchw() -> None:
    enc = ConvEncoder((4, 84, 84), "relu", architecture="conv_nature")
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    # 4 channels and more than one pixel: an NCHW tensor is not also channels_last
    assert _first_conv_input_layouts(enc, x) == [True]
    with torch.no_grad():
        assert _first_conv_input_layouts(enc, x) == [False]


def test_conv_encoder_layouts_give_the_same_outputs_and_gradients() -> None:
    torch.manual_seed(0)
    enc = ConvEncoder((4, 84, 84), "relu", architecture="conv_nature")
    x = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    trained = enc(x)
    trained.square().sum().backward()
    grads = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad()
    with torch.no_grad():
        inferred = enc(x)
    plain = enc.fc(enc.convs(x.float() / 255.0).flatten(1))  # NCHW all the way, with grad
    plain.square().sum().backward()
    torch.testing.assert_close(trained, inferred, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(trained, plain, rtol=1e-4, atol=1e-5)
    for channels_last_grad, p in zip(grads, enc.parameters()):
        # The layouts sum in different orders, so float32 rounding differs by a fraction of
        # the gradient's own scale; an element near zero can then differ by far more than
        # its own 1e-3. A wrong layout differs by the whole scale.
        scale = p.grad.abs().max().item()
        torch.testing.assert_close(channels_last_grad, p.grad, rtol=1e-3, atol=1e-4 * scale)


def test_encode_in_bfloat16_computes_the_convolutions_in_it_and_returns_float32() -> None:
    torch.manual_seed(0)
    enc = make_encoder({"obs": FRAMES}, "conv_nature", activation="relu")
    obs = {"obs": torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)}
    conv_dtypes: set[torch.dtype] = set()
    for conv in (m for m in enc.modules() if isinstance(m, torch.nn.Conv2d)):
        conv.register_forward_hook(lambda _m, _i, out: conv_dtypes.add(out.dtype))
    exact = encode(enc, obs)
    assert conv_dtypes == {torch.float32}
    conv_dtypes.clear()
    low = encode(enc, obs, torch.bfloat16)
    assert conv_dtypes == {torch.bfloat16} and low.dtype == torch.float32
    # bfloat16 keeps 8 bits of significand: within a few percent of the features' scale.
    assert (low - exact).abs().max() < 0.05 * exact.abs().max()
    low.square().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in enc.parameters())


# --- IMPALA's residual network ("large" architecture, Espeholt et al. 2018, figure 3) ---------

FRAMES = TensorSpec((4, 84, 84), torch.uint8)


def _conv_params(c_in: int, c_out: int) -> int:
    return c_out * c_in * 3 * 3 + c_out


def test_resnet_is_the_impala_large_network_on_84x84x4() -> None:
    enc = make_encoder({"obs": FRAMES}, "resnet").encoder
    assert isinstance(enc, ResnetEncoder) and enc.out_size == 256
    # Per stage: conv3x3 -> max pool 3x3/2 -> 2 residual blocks of two conv3x3 each.
    expected, c_in = 0, 4
    for stage, c_out in zip(enc.stages, (16, 32, 32), strict=True):
        convs = [m for m in stage.modules() if isinstance(m, torch.nn.Conv2d)]
        assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == (
            [(c_in, c_out, (3, 3), (1, 1))] + [(c_out, c_out, (3, 3), (1, 1))] * 4
        )
        assert (stage.pool.kernel_size, stage.pool.stride) == (3, 2)
        assert len(stage.blocks) == 2
        expected += _conv_params(c_in, c_out) + 4 * _conv_params(c_out, c_out)
        c_in = c_out
    # 84 -> 42 -> 21 -> 11, then a linear layer of 256 units.
    assert enc.fc.in_features == 32 * 11 * 11 and enc.fc.out_features == 256
    expected += 32 * 11 * 11 * 256 + 256
    assert expected == 1_089_232
    assert sum(p.numel() for p in enc.parameters()) == expected
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    out = enc(x)
    assert out.shape == (2, 256) and out.dtype == torch.float32
    assert (out >= 0).all()  # ends with a ReLU
    hwc = make_encoder({"obs": TensorSpec((84, 84, 4), torch.uint8)}, "resnet").encoder
    hwc.load_state_dict(enc.state_dict())  # channels-last frames: the same network
    torch.testing.assert_close(hwc(x.permute(0, 2, 3, 1)), out)


def test_resnet_blocks_are_residual() -> None:
    enc = ResnetEncoder((4, 84, 84))
    block = enc.stages[0].blocks[0]
    x = torch.randn(2, 16, 42, 42)
    with torch.no_grad():
        block.conv1.weight.zero_()
        block.conv1.bias.zero_()
    torch.testing.assert_close(block(x), x)  # a zero branch leaves only the skip connection
    with torch.no_grad():
        block.conv1.bias.fill_(1.0)
    torch.testing.assert_close(block(x), x + 1.0)


def test_resnet_gradients_reach_every_parameter() -> None:
    enc = ResnetEncoder((4, 84, 84))
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    enc(x).pow(2).sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_resnet_scales_uint8_and_takes_normalized_pixels_as_they_are() -> None:
    enc = ResnetEncoder((4, 84, 84))
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(enc(x), enc(x.float() / 255.0))
    # normalize_pixels: the actor-critic hands the encoder (x - mean) / std as floats.
    model = ActorCritic(
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        gym.spaces.Discrete(3),
        encoder="resnet",
        normalize_pixels=True,
    )
    assert model.normalized_keys == ["obs"]
    model.update_normalizer({"obs": x})
    normalized = model.normalize_observations({"obs": x})["obs"]
    assert normalized.dtype == torch.float32
    encoder = model.actor_encoder.encoder
    torch.testing.assert_close(model.actor_encoder({"obs": normalized}), encoder(normalized))
    assert model.act({"obs": x}, torch.zeros(2, 0)).actions.shape == (2, 1)


def test_resnet_runs_large_cpu_batches_in_chunks_with_the_same_result() -> None:
    enc = ResnetEncoder((4, 84, 84))
    # The largest activation of a chunk (the first stage's) stays under 16 MB.
    assert enc.chunk_size * 16 * 84 * 84 * 4 <= 16 << 20
    x = torch.randint(0, 256, (enc.chunk_size + 5, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(enc(x), torch.cat([enc._encode(x[:5]), enc._encode(x[5:])]))
