"""Unit tests for ActorCritic: act/evaluate shapes for every space combination, recurrent
consistency between stepping and whole-trajectory evaluation, normalisation, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.models.actor_critic import ActorCritic, ActOutput, EvaluateOutput
from sampleforge.spaces import action_spec, actions_to_env, observation_specs

# The combination grid uses the smallest images the conv encoder accepts (36 px) to stay fast;
# the real sizes (4x84x84 and 3x72x128) are covered once by test_full_size_image_observations.
OBS_SPACES = {
    "vector": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32),
    "image": gym.spaces.Box(0, 255, (4, 36, 36), np.uint8),
    "dict": gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (3, 36, 48), np.uint8),
            "vector": gym.spaces.Box(-1.0, 1.0, (5,), np.float32),
        }
    ),
}
FULL_SIZE_OBS_SPACES = {
    "image84": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
    "dict72x128": gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (3, 72, 128), np.uint8),
            "vector": gym.spaces.Box(-1.0, 1.0, (5,), np.float32),
        }
    ),
}
ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(4),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 3, 2]),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Discrete(21))),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
}
RNN_SIZE = 16
SMALL = {"mlp_hidden_sizes": (16, 16), "rnn_size": RNN_SIZE}


def random_obs(space: gym.Space, *batch: int) -> dict[str, torch.Tensor]:
    """Random observations {key: [*batch, *shape]} matching the specs of `space`."""
    out = {}
    for key, spec in observation_specs(space).items():
        if spec.dtype == torch.uint8:
            out[key] = torch.randint(0, 256, (*batch, *spec.shape), dtype=torch.uint8)
        else:
            out[key] = torch.randn(*batch, *spec.shape)
    return out


def expected_state_size(rnn_type: str, shared: bool) -> int:
    per_core = {"none": 0, "gru": RNN_SIZE, "lstm": 2 * RNN_SIZE}[rnn_type]
    return per_core * (1 if shared else 2)


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("rnn_type", ["none", "gru", "lstm"])
@pytest.mark.parametrize("action_name", list(ACTION_SPACES))
@pytest.mark.parametrize("obs_name", list(OBS_SPACES))
def test_act_and_evaluate_shapes(obs_name, action_name, rnn_type, shared) -> None:
    _check_act_and_evaluate(OBS_SPACES[obs_name], ACTION_SPACES[action_name], rnn_type, shared)


@pytest.mark.parametrize(
    ("obs_name", "action_name", "rnn_type", "shared"),
    [("image84", "discrete", "lstm", False), ("dict72x128", "tuple", "gru", True)],
)
def test_full_size_image_observations(obs_name, action_name, rnn_type, shared) -> None:
    _check_act_and_evaluate(
        FULL_SIZE_OBS_SPACES[obs_name], ACTION_SPACES[action_name], rnn_type, shared
    )


def _check_act_and_evaluate(obs_space, action_space, rnn_type: str, shared: bool) -> None:
    """act() and evaluate() return the documented shapes/dtypes and evaluate() backpropagates."""
    model = ActorCritic(obs_space, action_space, rnn_type=rnn_type, shared_weights=shared, **SMALL)
    spec = action_spec(action_space)
    state_size = expected_state_size(rnn_type, shared)
    assert model.rnn_state_size == state_size
    assert model.action_spec == spec and model.obs_specs == observation_specs(obs_space)
    assert (model.critic_encoder is None) == shared

    batch, time = 2, 3
    with torch.inference_mode():
        out = model.act(random_obs(obs_space, batch), torch.zeros(batch, state_size))
    assert isinstance(out, ActOutput)
    assert out.actions.shape == (batch, *spec.shape) and out.actions.dtype == spec.dtype
    assert out.log_probs.shape == (batch,) and out.log_probs.dtype == torch.float32
    assert out.values.shape == (batch,) and out.values.dtype == torch.float32
    assert out.new_rnn_states.shape == (batch, state_size)
    assert torch.isfinite(out.log_probs).all()
    for env_action in actions_to_env(out.actions.numpy(), action_space):
        assert action_space.contains(env_action)

    actions = torch.stack([out.actions] * time)  # [T, B, A]
    episode_starts = torch.zeros(time, batch)
    episode_starts[1, 0] = 1.0
    ev = model.evaluate(
        random_obs(obs_space, time, batch), torch.zeros(batch, state_size), episode_starts, actions
    )
    assert isinstance(ev, EvaluateOutput)
    assert (ev.uniform_kl is None) == isinstance(action_space, gym.spaces.Box)
    for tensor in ev:
        if tensor is None:
            continue
        assert tensor.shape == (time, batch) and tensor.dtype == torch.float32
        assert torch.isfinite(tensor).all()
    (ev.log_probs.mean() + ev.entropy.mean() + ev.values.mean()).backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("rnn_type", ["none", "lstm"])
def test_separate_critic_does_not_share_gradients(rnn_type) -> None:
    obs_space = OBS_SPACES["vector"]
    model = ActorCritic(
        obs_space, ACTION_SPACES["discrete"], rnn_type=rnn_type, shared_weights=False, **SMALL
    )
    time, batch = 3, 2
    ev = model.evaluate(
        random_obs(obs_space, time, batch),
        torch.zeros(batch, model.rnn_state_size),
        torch.zeros(time, batch),
        torch.randint(0, 4, (time, batch, 1)),
    )
    ev.values.sum().backward(retain_graph=True)
    assert all(p.grad is None for p in model.actor_encoder.parameters())
    assert all(p.grad is not None for p in model.critic_encoder.parameters())
    model.zero_grad(set_to_none=True)
    ev.log_probs.sum().backward()
    assert all(p.grad is None for p in model.critic_encoder.parameters())
    assert all(p.grad is not None for p in model.actor_encoder.parameters())


def _rollout_with_act(model, obs, state0, starts):
    """Step act() one step at a time like the inference worker: zero the state of envs whose
    episode starts at t, feed back new_rnn_states. Returns actions [T, B, A], log-probs [T, B],
    values [T, B]."""
    actions, log_probs, values = [], [], []
    state = state0
    with torch.inference_mode():
        for t in range(starts.shape[0]):
            state = state * (1 - starts[t]).unsqueeze(-1)
            out = model.act({k: v[t] for k, v in obs.items()}, state)
            actions.append(out.actions)
            log_probs.append(out.log_probs)
            values.append(out.values)
            state = out.new_rnn_states
    return torch.stack(actions), torch.stack(log_probs), torch.stack(values)


RECURRENT_CASES = [
    pytest.param("gru", True, "discrete", id="gru-shared-discrete"),
    pytest.param("lstm", True, "box", id="lstm-shared-box"),
    pytest.param("lstm", False, "multidiscrete", id="lstm-separate-multidiscrete"),
    pytest.param("gru", False, "tuple", id="gru-separate-tuple"),
]
TIME, BATCH = 7, 3


@pytest.mark.parametrize(("rnn_type", "shared", "action_name"), RECURRENT_CASES)
def test_evaluate_without_resets_equals_stepping_act(rnn_type, shared, action_name) -> None:
    torch.manual_seed(0)
    obs_space = OBS_SPACES["vector"]
    model = ActorCritic(
        obs_space, ACTION_SPACES[action_name], rnn_type=rnn_type, shared_weights=shared, **SMALL
    )
    obs = random_obs(obs_space, TIME, BATCH)
    state0 = torch.randn(BATCH, model.rnn_state_size)
    starts = torch.zeros(TIME, BATCH)
    actions, log_probs, values = _rollout_with_act(model, obs, state0, starts)
    ev = model.evaluate(obs, state0, starts, actions)
    torch.testing.assert_close(ev.log_probs, log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ev.values, values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("rnn_type", "shared", "action_name"), RECURRENT_CASES)
def test_evaluate_zeroes_state_at_episode_start(rnn_type, shared, action_name) -> None:
    torch.manual_seed(1)
    obs_space = OBS_SPACES["vector"]
    model = ActorCritic(
        obs_space, ACTION_SPACES[action_name], rnn_type=rnn_type, shared_weights=shared, **SMALL
    )
    obs = random_obs(obs_space, TIME, BATCH)
    state0 = torch.randn(BATCH, model.rnn_state_size)
    starts = torch.zeros(TIME, BATCH)
    split = 4
    starts[split, 1] = 1.0  # env 1 begins a new episode at t=4
    actions, log_probs, values = _rollout_with_act(model, obs, state0, starts)
    ev = model.evaluate(obs, state0, starts, actions)
    torch.testing.assert_close(ev.log_probs, log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ev.values, values, atol=1e-5, rtol=1e-5)

    # Same result as two separate sequences for env 1: [0, split) from state0, then [split, T)
    # from a zero state.
    def env1(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        return x[lo:hi, 1:2]

    zeros = torch.zeros
    first = model.evaluate(
        {k: env1(v, 0, split) for k, v in obs.items()},
        state0[1:2],
        zeros(split, 1),
        env1(actions, 0, split),
    )
    second = model.evaluate(
        {k: env1(v, split, TIME) for k, v in obs.items()},
        zeros(1, model.rnn_state_size),
        zeros(TIME - split, 1),
        env1(actions, split, TIME),
    )
    for field in ("log_probs", "values", "entropy"):
        joined = torch.cat([getattr(first, field), getattr(second, field)])
        torch.testing.assert_close(getattr(ev, field)[:, 1:2], joined, atol=1e-5, rtol=1e-5)

    # Without the reset flag the second half differs: the state really was carried before.
    no_reset = model.evaluate(obs, state0, torch.zeros(TIME, BATCH), actions)
    assert not torch.allclose(no_reset.values[split:, 1], ev.values[split:, 1])


def test_evaluate_accepts_rollout_plus_one_steps() -> None:
    model = ActorCritic(OBS_SPACES["vector"], ACTION_SPACES["discrete"], rnn_type="gru", **SMALL)
    time = 5 + 1
    actions = torch.randint(0, 4, (time, BATCH, 1))
    ev = model.evaluate(
        random_obs(OBS_SPACES["vector"], time, BATCH),
        torch.zeros(BATCH, model.rnn_state_size),
        torch.zeros(time, BATCH, dtype=torch.bool),
        actions,
    )
    assert ev.values.shape == (time, BATCH)


@pytest.mark.parametrize("action_name", list(ACTION_SPACES))
def test_deterministic_act_returns_the_mode(action_name) -> None:
    torch.manual_seed(2)
    obs_space = OBS_SPACES["vector"]
    model = ActorCritic(obs_space, ACTION_SPACES[action_name], rnn_type="lstm", **SMALL)
    obs = random_obs(obs_space, 8)
    state = torch.randn(8, model.rnn_state_size)
    with torch.inference_mode():
        first = model.act(obs, state, deterministic=True)
        second = model.act(obs, state, deterministic=True)
        features, _ = model.actor_core.step(model.actor_encoder(obs), state)
        mode = model.action_head(features).mode()
    assert torch.equal(first.actions, second.actions)
    assert torch.equal(first.actions, mode)
    assert torch.isfinite(first.log_probs).all()


def test_box_actions_are_clipped_for_the_env() -> None:
    space = gym.spaces.Box(-0.1, 0.1, (2,), np.float32)
    model = ActorCritic(OBS_SPACES["vector"], space, **SMALL)
    with torch.no_grad():
        model.action_head.log_std.fill_(1.0)  # std e: samples well outside [-0.1, 0.1]
    with torch.inference_mode():
        out = model.act(random_obs(OBS_SPACES["vector"], 64), torch.zeros(64, 0))
    assert out.actions.abs().max() > 0.1  # the policy's own samples are not clipped
    env_actions = np.stack(actions_to_env(out.actions.numpy(), space))
    assert env_actions.min() >= -0.1 and env_actions.max() <= 0.1


def test_initialisation_gains() -> None:
    model = ActorCritic(OBS_SPACES["vector"], ACTION_SPACES["discrete"], **SMALL)
    policy_w = model.action_head.linear.weight
    value_w = model.value_head.weight
    # Orthogonal rows have norm == gain (the layers here have fewer outputs than inputs).
    torch.testing.assert_close(policy_w.norm(dim=1), torch.full((4,), 0.01))
    torch.testing.assert_close(value_w.norm(dim=1), torch.ones(1))
    assert model.value_head.bias.abs().sum() == 0


def test_observation_normalisation_only_touches_float_keys_and_is_saved() -> None:
    obs_space = OBS_SPACES["dict"]
    model = ActorCritic(obs_space, ACTION_SPACES["discrete"], normalize_obs=True, **SMALL)
    assert model.normalized_keys == ["vector"]
    obs = random_obs(obs_space, 4, 5)  # [T, B, ...]
    obs["vector"] = obs["vector"] * 3 + 10
    model.update_normalizer(obs)
    normed = model.normalize_observations(obs)
    assert normed["image"] is obs["image"]
    flat = normed["vector"].reshape(-1, 5)
    torch.testing.assert_close(flat.mean(0), torch.zeros(5), atol=1e-4, rtol=0)

    state = model.state_dict()
    assert any(k.startswith("obs_normalizers.") and k.endswith(".mean") for k in state)
    clone = ActorCritic(obs_space, ACTION_SPACES["discrete"], normalize_obs=True, **SMALL)
    clone.load_state_dict(state)
    torch.testing.assert_close(clone.normalize_observations(obs)["vector"], normed["vector"])

    # With normalisation off the observations pass through untouched.
    plain = ActorCritic(obs_space, ACTION_SPACES["discrete"], **SMALL)
    assert plain.normalize_observations(obs)["vector"] is obs["vector"]
    plain.update_normalizer(obs)  # a no-op, not an error


def test_pixel_normalisation_is_per_pixel_and_separate_from_vector_normalisation() -> None:
    from sampleforge.models.actor_critic import PIXEL_STATISTICS_SAMPLES
    from sampleforge.models.factory import MODEL_SETTINGS

    assert "normalize_pixels" in MODEL_SETTINGS  # a checkpoint is only valid for the setting
    obs_space = OBS_SPACES["dict"]
    model = ActorCritic(obs_space, ACTION_SPACES["discrete"], normalize_pixels=True, **SMALL)
    assert model.normalized_keys == ["image"]
    image = obs_space["image"]
    # A static background (every pixel its own constant) with one pixel that varies.
    background = torch.randint(0, 256, image.shape, dtype=torch.uint8)
    frames = background.expand(600, *image.shape).clone()
    frames.view(600, -1)[:, 0] = torch.randint(0, 256, (600,), dtype=torch.uint8)
    model.update_normalizer({"image": frames, "vector": torch.zeros(600, 5)})
    rms = model.obs_normalizers[0]
    assert int(rms.count) <= PIXEL_STATISTICS_SAMPLES  # a strided subset of the 600 rows
    torch.testing.assert_close(
        rms.mean,
        background.float()
        .flatten()
        .index_put((torch.tensor([0]),), rms.mean.flatten()[:1])
        .view(image.shape),
    )
    normed = model.normalize_observations({"image": frames[:3], "vector": torch.ones(3, 5)})
    assert normed["image"].dtype == torch.float32
    assert normed["image"].flatten(1)[:, 1:].abs().max() == 0  # the background is gone
    assert normed["image"].flatten(1)[:, 0].abs().max() > 0.1  # what moves is kept
    assert "obs_normalizers.0.mean" in model.state_dict()


def test_normalisation_is_applied_inside_act() -> None:
    torch.manual_seed(3)
    obs_space = OBS_SPACES["vector"]
    model = ActorCritic(obs_space, ACTION_SPACES["box"], normalize_obs=True, **SMALL)
    obs = random_obs(obs_space, 6)
    before = model.act(obs, torch.zeros(6, 0), deterministic=True).values
    model.update_normalizer({"obs": obs["obs"] * 5 + 2})
    after = model.act(obs, torch.zeros(6, 0), deterministic=True).values
    assert not torch.allclose(before, after)


def test_unknown_options_raise() -> None:
    with pytest.raises(ValueError, match="rnn_type"):
        ActorCritic(OBS_SPACES["vector"], ACTION_SPACES["discrete"], rnn_type="transformer")
    with pytest.raises(ValueError, match="encoder"):
        ActorCritic(OBS_SPACES["vector"], ACTION_SPACES["discrete"], encoder="resnet")
