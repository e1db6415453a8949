"""Minibatches of single samples shuffled across the dataset (`shuffle_samples`, the PPO recipe).

For a feed-forward APPO with GAE the advantages depend only on what the acting policy recorded,
so they are computed once per dataset and any sample can go with any other in a minibatch. One
minibatch holding the whole dataset must then give exactly the update of the trajectory path.
"""

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.batcher import Dataset

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(3)
T, B = 8, 6


def _learner(**overrides) -> ActorCriticLearner:
    settings = dict(
        rollout=T,
        batch_size=T * B,
        num_batches_per_epoch=1,
        num_epochs=1,
        with_vtrace=False,
        gae_lambda=0.9,
        reward_scale=1.0,
    )
    settings.update(overrides)
    torch.manual_seed(0)
    return ActorCriticLearner(make_config(**settings), OBS, ACT, torch.device("cpu"))


def _dataset() -> Dataset:
    g = torch.Generator().manual_seed(1)
    dones = (torch.rand(T + 1, B, generator=g) < 0.15).float()
    valids = torch.ones(T + 1, B)
    valids[3, 2] = 0.0  # a reset step
    return Dataset(
        obs={"obs": torch.rand(T + 1, B, 4, generator=g) * 2 - 1},
        actions=torch.randint(0, 3, (T + 1, B, 1), generator=g),
        rnn_states=torch.zeros(T + 1, B, 0),
        rewards=torch.rand(T + 1, B, generator=g),
        dones=dones,
        valids=valids,
        log_probs=-1.1 + 0.1 * torch.randn(T + 1, B, generator=g),
        values=torch.randn(T + 1, B, generator=g),
        policy_versions=torch.zeros(T + 1, B, dtype=torch.int64),
        policy_ids=torch.zeros(T + 1, B, dtype=torch.int32),
    )


@pytest.mark.parametrize(
    "overrides",
    [{}, {"normalize_returns": True}, {"value_clip": 0.2}],
    ids=["plain", "normalize_returns", "value_clip"],
)
def test_one_minibatch_of_all_samples_is_the_trajectory_update(overrides):
    by_sample = _learner(shuffle_samples=True, **overrides)
    by_trajectory = _learner(shuffle_samples=False, **overrides)
    assert by_sample.trains_on_samples and not by_trajectory.trains_on_samples
    stats_s = by_sample.train(_dataset(), lambda: None)
    stats_t = by_trajectory.train(_dataset(), lambda: None)
    for key in (
        "losses/policy",
        "losses/value",
        "losses/entropy",
        "learner/approx_kl",
        "learner/explained_variance",
    ):
        assert stats_s[key] == pytest.approx(stats_t[key], rel=1e-4, abs=1e-6), key
    for (name, a), b in zip(by_sample.model.named_parameters(), by_trajectory.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_minibatches_mix_samples_of_different_trajectories_and_steps(monkeypatch):
    learner = _learner(batch_size=T, num_batches_per_epoch=B, num_epochs=2)
    seen = []
    original = learner._sample_loss

    def spy(batch, valids):
        seen.append(batch.obs["obs"].clone())
        return original(batch, valids)

    monkeypatch.setattr(learner, "_sample_loss", spy)
    data = _dataset()
    stats = learner.train(data, lambda: None)
    assert len(seen) == 2 * B and learner.policy_version == 2 * B
    where = {tuple(data.obs["obs"][t, b].tolist()): (t, b) for t in range(T) for b in range(B)}
    origins = [[where[tuple(x.tolist())] for x in batch] for batch in seen]
    assert all(len(o) == T for o in origins)
    # Each epoch uses every step of the dataset once (the bootstrap row never).
    for epoch in (origins[:B], origins[B:]):
        assert sorted(o for batch in epoch for o in batch) == sorted(where.values())
    # Not whole trajectories: minibatches draw from several of them.
    assert max(len({b for _, b in batch}) for batch in origins) > 1
    assert stats["policy_lag/max"] <= 2 * B


@pytest.mark.parametrize(
    "overrides",
    [{"with_vtrace": True}, {"rnn": "gru"}, {"algorithm": "a3c"}, {"shuffle_samples": False}],
)
def test_trajectory_minibatches_where_advantages_need_the_network_or_a_state(overrides):
    assert not _learner(**overrides).trains_on_samples


@pytest.mark.parametrize("shuffle_samples", [True, False], ids=["samples", "trajectories"])
def test_early_epochs_apply_until_the_policy_has_trained_on_early_env_steps(shuffle_samples):
    learner = _learner(
        num_epochs=1,
        early_num_epochs=3,
        early_env_steps=2 * T * B,
        shuffle_samples=shuffle_samples,
    )
    assert learner.trains_on_samples == shuffle_samples
    steps_per_dataset = []
    for _ in range(4):
        assert learner.sgd_steps_per_dataset == (3 if learner.env_steps < 2 * T * B else 1)
        before = learner.policy_version
        stats = learner.train(_dataset(), lambda: None)
        steps_per_dataset.append(learner.policy_version - before)
        assert stats["learner/num_epochs"] == steps_per_dataset[-1]
    assert steps_per_dataset == [3, 3, 1, 1]
    assert learner.sgd_steps_per_dataset == 1
