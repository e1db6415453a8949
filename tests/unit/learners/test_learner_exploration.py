"""The learner adds the policy's KL to uniform to its loss on both of its minibatch paths."""

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(2)


@pytest.mark.parametrize("with_vtrace", [True, False], ids=["trajectories", "samples"])
def test_the_total_holds_the_symmetric_kl_of_the_learners_policy(
    make_dataset, with_vtrace: bool
) -> None:
    cfg = make_config(
        rollout=8,
        batch_size=32,
        num_batches_per_epoch=1,
        num_epochs=1,
        with_vtrace=with_vtrace,
        shuffle_samples=True,
        exploration_loss="symmetric_kl",
        entropy_coeff=0.5,
    )
    learner = ActorCriticLearner(cfg, OBS, ACT, torch.device("cpu"))
    assert learner.trains_on_samples == (not with_vtrace)
    with torch.no_grad():  # a nearly deterministic policy: KL to uniform about 3, entropy about 0
        learner.model.action_head.linear.bias.copy_(torch.tensor([6.0, -6.0]))
    stats = learner.train(make_dataset(), on_sgd_step=lambda: None)  # one SGD step

    assert stats["learner/uniform_kl"] == pytest.approx(3.0, abs=0.3)
    exploration = stats["losses/total"] - stats["losses/policy"] - 0.5 * stats["losses/value"]
    assert exploration == pytest.approx(0.5 * stats["learner/uniform_kl"], rel=1e-4)
