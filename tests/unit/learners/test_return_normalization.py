"""normalize_returns: the critic predicts returns in units of running target statistics.

The whole SGD step must be invariant to the reward's scale once the statistics have seen
targets of that scale: same value loss, same policy loss, same new weights for rewards x1 and
x1000. Behaviour values are stored (by `ActorCritic.act`) in reward units; the statistics are
model buffers, so they are checkpointed and published to inference workers with the weights.
"""

import copy

import gymnasium as gym
import pytest
import torch

from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.batcher import Dataset
from sampleforge.models.actor_critic import RETURNS_NORMALIZER_CLIP, ActorCritic
from sampleforge.models.factory import MODEL_SETTINGS, make_actor_critic

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(2)
T, B = 8, 4


def _learner(seed: int = 0, **overrides) -> ActorCriticLearner:
    settings = dict(
        rollout=T,
        batch_size=T * B,
        num_batches_per_epoch=1,
        num_epochs=1,
        normalize_returns=True,
        reward_scale=1.0,
    )
    settings.update(overrides)
    torch.manual_seed(seed)
    return ActorCriticLearner(make_config(**settings), OBS, ACT, torch.device("cpu"))


def _dataset(scale: float = 1.0) -> Dataset:
    """Rewards ~ 1 and behaviour values ~ 5 (reward units), both multiplied by `scale`."""
    g = torch.Generator().manual_seed(0)
    dones = (torch.rand(T + 1, B, generator=g) < 0.1).float()
    return Dataset(
        obs={"obs": torch.rand(T + 1, B, 4, generator=g) * 2 - 1},
        actions=torch.randint(0, 2, (T + 1, B, 1), generator=g),
        rnn_states=torch.zeros(T + 1, B, 0),
        rewards=(torch.rand(T + 1, B, generator=g) + 0.5) * scale,
        dones=dones,
        valids=torch.ones(T + 1, B),
        log_probs=torch.full((T + 1, B), -0.69),
        values=(5.0 + torch.randn(T + 1, B, generator=g)) * scale,
        policy_versions=torch.zeros(T + 1, B, dtype=torch.int64),
        policy_ids=torch.zeros(T + 1, B, dtype=torch.int32),
    )


def _prime(learner: ActorCriticLearner, scale: float) -> None:
    """Statistics as after training on returns of this scale (mean 6, std 3 at scale 1)."""
    g = torch.Generator().manual_seed(1)
    learner.model.returns_normalizer.update((6.0 + 3.0 * torch.randn(1000, generator=g)) * scale)


def _train_once(learner: ActorCriticLearner, data: Dataset) -> dict[str, float]:
    torch.manual_seed(123)  # the same minibatch order for every learner
    return learner.train(data, lambda: None)


def test_denormalize_inverts_normalize():
    rms = make_actor_critic(make_config(normalize_returns=True), OBS, ACT).returns_normalizer
    rms.update(torch.randn(500) * 3000.0 + 20_000.0)
    x = torch.linspace(5_000.0, 35_000.0, 11)
    torch.testing.assert_close(rms.denormalize(rms.normalize(x)), x, rtol=1e-6, atol=1e-2)
    y = torch.linspace(-3.0, 3.0, 7)
    torch.testing.assert_close(rms.normalize(rms.denormalize(y)), y, rtol=1e-5, atol=1e-5)
    assert rms.clip == RETURNS_NORMALIZER_CLIP
    far = rms.denormalize(torch.tensor(50.0))  # de-normalising never clips
    assert float(rms.normalize(far)) == RETURNS_NORMALIZER_CLIP


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # APPO with V-trace (network values)
        {"with_vtrace": False},  # APPO with GAE on the behaviour values
        {"value_clip": 0.2},  # value clipping around the behaviour values
        {"algorithm": "a3c", "value_clip": 0.2},
    ],
    ids=["vtrace", "gae", "value_clip", "a3c"],
)
def test_the_update_does_not_depend_on_the_reward_scale(overrides):
    small, large = _learner(**overrides), _learner(**overrides)
    _prime(small, 1.0)
    _prime(large, 1000.0)
    stats_small = _train_once(small, _dataset(1.0))
    stats_large = _train_once(large, _dataset(1000.0))
    assert stats_small["losses/value"] > 0.01
    assert stats_large["losses/value"] == pytest.approx(stats_small["losses/value"], rel=1e-3)
    assert stats_large["losses/policy"] == pytest.approx(
        stats_small["losses/policy"], rel=1e-3, abs=1e-6
    )
    # The same update: identical weights afterwards, statistics 1000x apart.
    for (name, a), b in zip(small.model.named_parameters(), large.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5, msg=name)
    rms_small, rms_large = small.model.returns_normalizer, large.model.returns_normalizer
    assert float(rms_large.mean) == pytest.approx(1000.0 * float(rms_small.mean), rel=1e-4)
    assert float(rms_large.var) == pytest.approx(1e6 * float(rms_small.var), rel=1e-3)


def test_without_normalization_the_value_loss_scales_with_the_rewards():
    """The check above has teeth: without normalize_returns the loss grows ~1e6-fold."""
    small, large = _learner(normalize_returns=False), _learner(normalize_returns=False)
    value_small = _train_once(small, _dataset(1.0))["losses/value"]
    value_large = _train_once(large, _dataset(1000.0))["losses/value"]
    assert value_large > 1e5 * value_small


def test_statistics_follow_the_targets_once_per_minibatch():
    learner = _learner(num_epochs=2)
    before = copy.deepcopy(learner.model.returns_normalizer.state_dict())
    assert int(before["count"]) == 0
    stats = _train_once(learner, _dataset(1000.0))
    rms = learner.model.returns_normalizer
    assert int(rms.count) == 2 * T * B  # each minibatch's valid targets, each epoch
    # Targets are discounted sums of rewards ~1000 plus bootstrap values: thousands.
    assert 500.0 < float(rms.mean) < 20_000.0 and float(rms.var.sqrt()) > 50.0
    assert stats["learner/returns_mean"] == pytest.approx(float(rms.mean), rel=0.5)


def test_only_valid_targets_enter_the_statistics():
    learner = _learner()
    data = _dataset()
    data.valids[:4, 0] = 0.0
    data.rewards[2, 0] = float("nan")  # an env fault's transition: never trained on
    _train_once(learner, data)
    assert int(learner.model.returns_normalizer.count) == T * B - 4
    assert torch.isfinite(learner.model.returns_normalizer.mean)
    assert learner.skipped_updates == 0


def test_a_skipped_update_leaves_the_statistics_untouched():
    learner = _learner()
    _train_once(learner, _dataset())
    before = copy.deepcopy(learner.model.returns_normalizer.state_dict())
    data = _dataset()
    data.rewards[5, 2] = float("inf")  # a valid non-finite reward: the step is skipped
    _train_once(learner, data)
    assert learner.skipped_updates == 1
    after = learner.model.returns_normalizer.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_act_and_evaluate_return_values_in_reward_units():
    model = ActorCritic(OBS, ACT, normalize_returns=True)
    model.returns_normalizer.update(torch.tensor([90.0, 110.0]))  # mean 100, std 10
    obs = torch.rand(3, 5, 4)
    with torch.no_grad():
        ev = model.evaluate(
            {"obs": obs},
            torch.zeros(5, 0),
            torch.zeros(3, 5),
            torch.zeros(3, 5, 1, dtype=torch.int64),
        )
        acted = model.act({"obs": obs[0]}, torch.zeros(5, 0)).values
    raw = ev.normalized_values
    torch.testing.assert_close(ev.values, 100.0 + raw * 10.0, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(acted, ev.values[0], rtol=1e-5, atol=1e-4)
    # Without normalize_returns both are the head's output.
    plain = ActorCritic(OBS, ACT)
    assert plain.returns_normalizer is None
    ev = plain.evaluate(
        {"obs": obs}, torch.zeros(5, 0), torch.zeros(3, 5), torch.zeros(3, 5, 1, dtype=torch.int64)
    )
    assert ev.values is ev.normalized_values


def test_statistics_are_saved_and_published_with_the_weights():
    assert "normalize_returns" in MODEL_SETTINGS  # a checkpoint is only valid for this setting
    cfg = make_config(normalize_returns=True)
    model = make_actor_critic(cfg, OBS, ACT)
    model.returns_normalizer.update(torch.randn(77) * 500.0 + 3000.0)
    state = model.state_dict()
    assert {"returns_normalizer.mean", "returns_normalizer.var", "returns_normalizer.count"} <= set(
        state
    )
    plain = make_config(normalize_returns=False)
    assert "returns_normalizer.mean" not in make_actor_critic(plain, OBS, ACT).state_dict()

    restored = make_actor_critic(cfg, OBS, ACT)
    restored.load_state_dict(state)
    torch.testing.assert_close(restored.returns_normalizer.mean, model.returns_normalizer.mean)

    shared = SharedPolicyWeights(model_numel(model))
    shared.publish(model, version=3)
    reader = make_actor_critic(cfg, OBS, ACT)  # an inference worker's copy
    assert shared.pull(reader, have_version=-1) == 3
    for key, value in model.state_dict().items():
        assert torch.equal(reader.state_dict()[key], value), key
    obs = {"obs": torch.rand(6, 4)}
    with torch.no_grad():
        torch.testing.assert_close(
            reader.act(obs, torch.zeros(6, 0)).values, model.act(obs, torch.zeros(6, 0)).values
        )
