"""Initialisation schemes (models/init_schemes.py): what each sets, and what it leaves alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from sampleforge.config import make_config
from sampleforge.models.actor_critic import ActorCritic
from sampleforge.models.factory import make_actor_critic
from sampleforge.models.init_schemes import apply_init_scheme

IMAGE = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
FOUR_ACTIONS = gym.spaces.Discrete(4)


def gains(layer: nn.Linear | nn.Conv2d) -> torch.Tensor:
    """The singular values of the layer's weight as a matrix: all equal to the orthogonal gain."""
    return torch.linalg.svdvals(layer.weight.detach().flatten(1))


def model(scheme: str, **kwargs) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(IMAGE, FOUR_ACTIONS, encoder="conv_nature", init_scheme=scheme, **kwargs)


def test_unit_gives_every_linear_and_conv_layer_orthogonal_gain_one_and_zero_bias():
    layers = [m for m in model("unit").modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    assert len(layers) == 6  # 3 conv, the encoder's linear, the policy and value heads
    for layer in layers:
        assert torch.allclose(gains(layer), torch.ones(1), atol=1e-4)
        assert not layer.bias.any()


def test_ppo_keeps_the_small_policy_head_and_the_hidden_gain_of_sqrt_2():
    ppo = model("ppo")
    assert torch.allclose(gains(ppo.action_head.linear), torch.tensor(0.01), atol=1e-6)
    assert torch.allclose(gains(ppo.value_head), torch.ones(1), atol=1e-4)
    conv = next(m for m in ppo.modules() if isinstance(m, nn.Conv2d))
    assert torch.allclose(gains(conv), torch.tensor(2.0).sqrt(), atol=1e-4)


def test_unit_uniform_is_unit_but_for_ppos_small_policy_head():
    net = model("unit_uniform")
    layers = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    assert len(layers) == 6
    for layer in layers:
        gain = 0.01 if layer is net.action_head.linear else 1.0
        assert torch.allclose(gains(layer), torch.tensor(gain), atol=1e-4 * gain)
        assert not layer.bias.any()


def test_unit_uniform_makes_a_gaussian_heads_first_mean_small():
    net = ActorCritic(
        gym.spaces.Box(-1, 1, (3,), np.float32),
        gym.spaces.Box(-1, 1, (2,), np.float32),
        init_scheme="unit_uniform",
    )
    heads = [m for m in net.action_head.modules() if isinstance(m, nn.Linear)]
    assert heads and all(torch.allclose(gains(h), torch.tensor(0.01), atol=1e-6) for h in heads)


def test_unit_starts_from_a_policy_far_from_uniform_and_ppo_from_a_nearly_uniform_one():
    # The point of the scheme: the size of the first policy's logits (0 is uniform).
    steps, envs = 1, 64
    obs = {"obs": torch.randint(0, 256, (steps, envs, *IMAGE.shape), dtype=torch.uint8)}
    spread = {}
    for scheme in ("ppo", "unit", "unit_uniform"):
        net = model(scheme)
        logits: list[torch.Tensor] = []
        net.action_head.linear.register_forward_hook(
            lambda m, i, out, seen=logits: seen.append(out)
        )
        net.evaluate(
            obs,
            torch.zeros(envs, net.rnn_state_size),
            torch.zeros(steps, envs),
            torch.zeros(steps, envs, 1, dtype=torch.long),
        )
        spread[scheme] = logits[0].std(dim=-1).mean().item()
    assert spread["ppo"] < 0.01 and spread["unit_uniform"] < 0.01
    assert spread["unit"] > 20 * max(spread["ppo"], spread["unit_uniform"])


def test_recurrent_cores_keep_their_own_initialisation():
    ppo, unit = (
        model("ppo", rnn_type="gru", rnn_size=16),
        model("unit", rnn_type="gru", rnn_size=16),
    )
    for (name, a), b in zip(ppo.actor_core.named_parameters(), unit.actor_core.parameters()):
        assert torch.equal(a, b), name


def test_an_unknown_scheme_is_a_one_line_error_naming_the_allowed_ones():
    with pytest.raises(
        ValueError, match="unknown init_scheme 'xavier'; allowed: ppo, unit, unit_uniform$"
    ):
        apply_init_scheme(nn.Linear(2, 2), "xavier")


def test_the_model_factory_builds_with_the_configured_scheme():
    cfg = make_config(env="CartPole-v1", init_scheme="unit")
    net = make_actor_critic(cfg, gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
    assert torch.allclose(gains(net.action_head.linear), torch.ones(1), atol=1e-4)
