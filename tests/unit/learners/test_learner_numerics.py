"""The learner never lets a non-finite value into the model, the optimizer or a checkpoint."""

import copy

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner, NonFiniteTrainingError

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(2)


def _learner(**overrides) -> ActorCriticLearner:
    cfg = make_config(rollout=8, batch_size=32, num_batches_per_epoch=1, num_epochs=1, **overrides)
    return ActorCriticLearner(cfg, OBS, ACT, torch.device("cpu"))


def _state(learner: ActorCriticLearner) -> dict:
    return copy.deepcopy(
        {"model": learner.model.state_dict(), "optimizer": learner.optimizer.state_dict()}
    )


def _same(a: dict, b: dict) -> bool:
    flat_a, flat_b = _flatten(a), _flatten(b)
    return flat_a.keys() == flat_b.keys() and all(
        torch.equal(flat_a[k], flat_b[k]) if torch.is_tensor(flat_a[k]) else flat_a[k] == flat_b[k]
        for k in flat_a
    )


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_update_is_skipped_leaving_everything_untouched(make_dataset, bad):
    learner = _learner()
    learner.train(make_dataset(), lambda: None)  # optimizer state exists now
    before, version = _state(learner), learner.policy_version
    stats = learner.train(make_dataset(reward=bad), lambda: None)
    assert _same(before, _state(learner))
    assert learner.policy_version == version
    assert learner.skipped_updates == 1
    assert stats["health/skipped_updates"] == 1.0
    learner.train(make_dataset(), lambda: None)  # a good update afterwards still happens
    assert learner.policy_version == version + 1 and learner.consecutive_skips == 0


def test_too_many_consecutive_skips_fail_with_a_clear_error(make_dataset):
    learner = _learner(max_consecutive_skipped_updates=3)
    for _ in range(2):
        learner.train(make_dataset(reward=float("nan")), lambda: None)
    with pytest.raises(NonFiniteTrainingError, match="3 SGD steps in a row"):
        learner.train(make_dataset(reward=float("nan")), lambda: None)


def test_masked_non_finite_rewards_do_not_poison_the_update(make_dataset):
    learner = _learner()
    data = make_dataset()
    data.rewards[3, 1] = float("nan")
    data.valids[3, 1] = 0.0  # an env fault's transition: never trained on
    learner.train(data, lambda: None)
    assert learner.skipped_updates == 0
    assert all(torch.isfinite(p).all() for p in learner.model.parameters())


def test_the_check_before_a_checkpoint_refuses_a_non_finite_parameter():
    # The check alone; that the worker's save path runs it and writes nothing is
    # tests/component/test_learner_worker.py::test_a_checkpoint_of_a_non_finite_model_is_refused...
    learner = _learner()
    learner.assert_finite()
    with torch.no_grad():
        next(learner.model.parameters())[0].fill_(float("nan"))
    with pytest.raises(NonFiniteTrainingError, match="refusing to write a checkpoint"):
        learner.assert_finite()


def test_checkpoint_of_another_model_gives_a_clear_error():
    other = ActorCriticLearner(make_config(mlp_hidden_sizes=(8,)), OBS, ACT, torch.device("cpu"))
    with pytest.raises(ValueError, match="does not fit this model"):
        _learner().load_state_dict(other.state_dict())


@pytest.mark.gpu
def test_sgd_steps_on_cuda_match_the_same_steps_on_the_cpu(make_dataset):
    cfg = make_config(rollout=8, batch_size=32, num_batches_per_epoch=1, num_epochs=2)
    torch.manual_seed(0)
    on_cpu = ActorCriticLearner(cfg, OBS, ACT, torch.device("cpu"))
    on_cuda = ActorCriticLearner(cfg, OBS, ACT, torch.device("cuda"))
    on_cuda.load_state_dict(on_cpu.state_dict())
    data = make_dataset(reward=1.0)
    stats_cpu = on_cpu.train(data, lambda: None)
    stats_cuda = on_cuda.train(data.to(torch.device("cuda")), lambda: None)
    assert on_cuda.policy_version == on_cpu.policy_version == 2
    assert next(on_cuda.model.parameters()).device.type == "cuda"
    for (name, a), b in zip(on_cpu.model.state_dict().items(), on_cuda.model.state_dict().values()):
        assert torch.allclose(a, b.cpu(), rtol=1e-4, atol=1e-5), name
    for key in ("losses/policy", "losses/value", "losses/entropy", "learner/grad_norm"):
        assert stats_cuda[key] == pytest.approx(stats_cpu[key], rel=1e-3, abs=1e-5), key


@pytest.mark.parametrize("first_step", [True, False])
def test_a_step_that_leaves_non_finite_weights_is_undone_before_it_is_published(
    make_dataset, first_step
):
    """A finite loss and gradient, but a learning rate (here set as PBT would) that makes the
    weights infinite: the step is undone, never published, and counted as skipped."""
    learner = _learner()
    if not first_step:
        learner.train(make_dataset(reward=1.0), lambda: None)  # Adam's moments exist now
    model_before = copy.deepcopy(learner.model.state_dict())
    moments_before = copy.deepcopy(learner.optimizer.state_dict()["state"])
    version = learner.policy_version
    learner.set_hyperparameters({"learning_rate": float("inf")})
    published = []

    def on_sgd_step() -> None:  # what the learner worker would publish to inference
        published.append(all(torch.isfinite(p).all() for p in learner.model.parameters()))

    stats = learner.train(make_dataset(reward=1.0), on_sgd_step)
    assert published == [True]
    assert _same(model_before, learner.model.state_dict())
    assert _same(moments_before, learner.optimizer.state_dict()["state"])
    assert learner.policy_version == version
    assert learner.skipped_updates == 1 and stats["health/skipped_updates"] == 1.0
    learner.assert_finite()  # a checkpoint could be written
    learner.set_hyperparameters({"learning_rate": 1e-3})
    learner.train(make_dataset(reward=1.0), lambda: None)  # training goes on from there
    assert learner.policy_version == version + 1 and learner.consecutive_skips == 0
