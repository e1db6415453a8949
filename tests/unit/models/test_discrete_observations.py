"""Discrete, MultiDiscrete and MultiBinary observations: stored as integers, one-hot (or bit)
encoded inside the model; small images under the "auto" encoder go to the MLP."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.models.actor_critic import ActorCritic
from sampleforge.models.encoders import (
    ConvEncoder,
    MultiInputEncoder,
    OneHot,
    VectorInput,
    make_encoder,
)
from sampleforge.spaces import TensorSpec, observation_specs, observation_to_dict

# What the MiniGrid-like test env shows once its Text mission is dropped.
MINIGRID = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
        "direction": gym.spaces.Discrete(4),
    }
)


def _batch(space: gym.Space, observations: list) -> dict[str, torch.Tensor]:
    rows = [observation_to_dict(obs, space) for obs in observations]
    return {key: torch.as_tensor(np.stack([row[key] for row in rows])) for key in rows[0]}


def test_one_hot_of_a_discrete_index() -> None:
    one_hot = OneHot((4,))
    out = one_hot(torch.tensor([0, 3, 1], dtype=torch.int8))
    torch.testing.assert_close(out, torch.eye(4)[[0, 3, 1]])
    assert one_hot.out_size == 4 and out.dtype == torch.float32


def test_multi_discrete_is_one_hot_per_part_concatenated() -> None:
    one_hot = OneHot((3, 2))
    out = one_hot(torch.tensor([[2, 1], [0, 0]], dtype=torch.int16))
    expected = torch.tensor([[0.0, 0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0, 0.0]])
    torch.testing.assert_close(out, expected)
    # A 2-D nvec: its elements in row-major order, each in its own block.
    grid = OneHot((2, 3, 2, 2))
    out = grid(torch.tensor([[[1, 2], [0, 1]]], dtype=torch.int8))
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]]))


def test_multi_binary_is_used_as_bits() -> None:
    (spec,) = observation_specs(gym.spaces.MultiBinary(4)).values()
    bits = VectorInput(spec)
    out = bits(torch.tensor([[1, 0, 0, 1]], dtype=torch.int8))
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert bits.size == 4


def test_the_start_offset_is_removed_before_the_one_hot() -> None:
    space = gym.spaces.Discrete(3, start=5)
    (spec,) = observation_specs(space).values()
    encode = VectorInput(spec)
    out = encode(_batch(space, [5, 6, 7])["obs"])
    torch.testing.assert_close(out, torch.eye(3))
    multi = gym.spaces.MultiDiscrete([2, 3], start=[-1, 10])
    (spec,) = observation_specs(multi).values()
    out = VectorInput(spec)(_batch(multi, [np.array([0, 10])])["obs"])
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0]]))


def test_the_encoder_output_depends_on_the_discrete_part() -> None:
    """Same image, four directions: four different features (an encoder that ignored the
    direction, or fed its raw index, would not tell them apart this way)."""
    torch.manual_seed(0)
    encoder = make_encoder(observation_specs(MINIGRID), "auto", (32,), "tanh")
    assert isinstance(encoder, MultiInputEncoder)
    assert encoder.mlp is not None and encoder.mlp.in_dim == 4 + 7 * 7 * 3  # one-hot + pixels
    image = np.zeros((7, 7, 3), np.uint8)
    obs = _batch(MINIGRID, [{"image": image, "direction": d} for d in range(4)])
    features = encoder(obs)
    for a in range(4):
        for b in range(a + 1, 4):
            assert not torch.allclose(features[a], features[b])
    # The first layer sees exactly the one-hot: its columns for direction d get the gradient
    # of sample d only.
    first = encoder.mlp.net[0]
    features[2].sum().backward()
    assert first.weight.grad is not None
    direction_columns = first.weight.grad[:, :4]  # "direction" sorts before "image"
    assert direction_columns[:, 2].abs().sum() > 0
    assert direction_columns[:, [0, 1, 3]].abs().sum() == 0


def test_top_level_discrete_observations_train_through_the_actor_critic() -> None:
    space = gym.spaces.MultiDiscrete([3, 4], start=[1, 0])
    model = ActorCritic(space, gym.spaces.Discrete(2), normalize_obs=True, rnn_type="gru")
    assert model.normalized_keys == []  # indices are one-hot encoded, never z-scored
    obs = _batch(space, [space.sample() for _ in range(6)])
    obs = {key: value.reshape(3, 2, *value.shape[1:]) for key, value in obs.items()}
    out = model.evaluate(
        obs,
        torch.zeros(2, model.rnn_state_size),
        torch.zeros(3, 2),
        torch.zeros(3, 2, 1, dtype=torch.long),
    )
    out.log_probs.sum().backward()
    assert all(p.grad is not None for p in model.actor_encoder.parameters())


def test_only_float_keys_are_normalized() -> None:
    space = gym.spaces.Dict(
        {
            "direction": gym.spaces.Discrete(4),
            "flags": gym.spaces.MultiBinary(2),
            "vector": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        }
    )
    model = ActorCritic(space, gym.spaces.Discrete(2), normalize_obs=True)
    assert model.normalized_keys == ["vector"]


def test_the_one_hot_leaves_the_checkpoint_layout_alone() -> None:
    """The one-hot modules hold no parameters and no saved buffers: checkpoints of models
    without discrete keys keep their keys, and discrete ones add none."""
    model = ActorCritic(MINIGRID, gym.spaces.Discrete(4))
    assert not any("offsets" in key for key in model.state_dict())
    box_only = MultiInputEncoder(
        {"a": TensorSpec((3,), torch.float32), "b": TensorSpec((2,), torch.float32)}
    )
    assert sorted(box_only.state_dict()) == [
        "head.0.bias",
        "head.0.weight",
        "mlp.net.0.bias",
        "mlp.net.0.weight",
        "mlp.net.2.bias",
        "mlp.net.2.weight",
    ]


def test_auto_sends_images_too_small_for_the_conv_encoder_to_the_mlp_scaled() -> None:
    (spec,) = observation_specs(MINIGRID["image"]).values()
    encoder = make_encoder({"obs": spec}, "auto")
    assert not any(isinstance(m, ConvEncoder) for m in encoder.modules())
    inputs = encoder.inputs
    assert isinstance(inputs, VectorInput)
    pixels = torch.full((1, 7, 7, 3), 255, dtype=torch.uint8)
    torch.testing.assert_close(inputs(pixels), torch.ones(1, 147))  # scaled like images
    with pytest.raises(ValueError, match="too small for the conv_simple encoder"):
        make_encoder({"obs": spec}, "conv_simple")
    large = TensorSpec((3, 36, 36), torch.uint8)
    assert isinstance(make_encoder({"obs": large}, "auto").encoder, ConvEncoder)
