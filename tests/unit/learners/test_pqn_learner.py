"""PQNLearner: Q(lambda) regression on fresh datasets, trained only on its own policy's steps,
reporting what the other learners report, resuming exactly and skipping non-finite updates."""

import copy

import gymnasium as gym
import pytest
import torch

from sampleforge.config import make_config
from sampleforge.learners.optimization import NonFiniteTrainingError
from sampleforge.learners.pqn_learner import PQNLearner
from sampleforge.models.factory import make_q_policy

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(2)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # A tiny model: a second thread only adds contention (16x slower on a busy 2-core box).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _learner(seed: int = 0, **overrides) -> PQNLearner:
    # The conftest's dataset: 8 steps x 4 trajectories = 2 minibatches of 16.
    settings = dict(
        algorithm="pqn",
        rollout=8,
        batch_size=16,
        num_batches_per_epoch=2,
        num_epochs=2,
        learning_rate=1e-3,
        lr_schedule="constant",
    )
    cfg = make_config(**{**settings, **overrides})
    torch.manual_seed(seed)
    return PQNLearner(cfg, make_q_policy(cfg, OBS, ACT), torch.device("cpu"))


def _weights(learner: PQNLearner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner.model.state_dict().items()}


def _train(learner: PQNLearner, data, seed: int = 1) -> dict[str, float]:
    torch.manual_seed(seed)  # the minibatch order
    return learner.train(data, lambda: None)


def test_td_loss_falls_on_a_fixed_dataset(make_dataset):
    # lambda 1 and episodes that end within the rollout: the targets are the discounted
    # returns, fixed, so the loss is a plain regression that SGD must drive down.
    # The first feature tells the step of the episode, on which the return depends.
    learner = _learner(q_lambda=1.0, learning_rate=3e-3)
    data = make_dataset(reward=1.0)
    data.dones[3] = data.dones[7] = 1.0
    data.obs["obs"][:, :, 0] = (torch.arange(9) % 4)[:, None] / 4.0
    losses = []
    for _ in range(16):
        data.policy_versions.fill_(learner.policy_version)  # fresh: none dropped as stale
        losses.append(_train(learner, data)["losses/td"])
    assert losses[-1] < 0.1 * losses[0]


def test_every_sgd_step_is_published_with_the_env_steps_trained_on(make_dataset):
    learner = _learner()
    seen = []

    def on_sgd_step() -> None:
        seen.append((learner.policy_version, int(learner.model.trained_env_steps)))

    learner.train(make_dataset(), on_sgd_step)
    assert seen == [(v, 32) for v in range(1, learner.sgd_steps_per_dataset + 1)]
    assert learner.env_steps == 32


def _with_other_policy(data, seed: int):
    """Trajectories 0 and 1 of `data` played by policy 1 from step 4 on, with actions, rewards
    and later observations drawn from `seed` (step 4's observation is the one this policy's
    last step led to: the state its target may bootstrap from)."""
    g = torch.Generator().manual_seed(seed)
    data.policy_ids[4:, :2] = 1
    data.obs["obs"][5:, :2] = torch.rand(data.obs["obs"][5:, :2].shape, generator=g)
    data.actions[4:, :2] = torch.randint(0, 2, data.actions[4:, :2].shape, generator=g)
    data.rewards[4:, :2] = 1e4 * torch.rand(data.rewards[4:, :2].shape, generator=g)
    return data


def test_other_policies_steps_change_nothing(make_dataset):
    """Steps another policy played after an episode boundary (as rows change policy), marked
    invalid as the batcher marks them, enter no loss, whatever they hold; nor the env steps."""

    def dataset(seed: int):
        data = make_dataset(reward=1.0)
        data.dones[3] = 1.0
        data.valids[4:, :2] = 0.0
        return _with_other_policy(data, seed)

    a, b = _learner(), _learner()
    _train(a, dataset(1))
    _train(b, dataset(2))
    for k, v in _weights(a).items():
        assert torch.equal(v, _weights(b)[k]), k
    assert a.env_steps == 8 * 4 - 4 * 2  # steps 4..7 of the first two trajectories: not ours


def test_targets_never_run_through_other_policies_steps(make_dataset):
    """The learner masks other policies' steps itself, in the targets too: recorded valid and
    with no episode end before them, their rewards still never reach this policy's targets."""
    a, b = _learner(), _learner()
    _train(a, _with_other_policy(make_dataset(reward=1.0), 1))
    _train(b, _with_other_policy(make_dataset(reward=1.0), 2))
    for k, v in _weights(a).items():
        assert torch.equal(v, _weights(b)[k]), k


def test_steps_older_than_max_policy_lag_are_not_trained_on(make_dataset):
    learner = _learner(max_policy_lag=5)
    before = _weights(learner)
    data = make_dataset(reward=1.0)
    data.policy_versions.fill_(-6)  # 6 SGD steps old
    stats = _train(learner, data)
    assert stats["learner/dropped_stale_fraction"] == 1.0
    for k, v in before.items():
        if k != "trained_env_steps":
            assert torch.equal(v, _weights(learner)[k]), k


def test_reports_what_the_other_learners_report(make_dataset):
    learner = _learner()
    _train(learner, make_dataset())  # 4 SGD steps: the policy is at version 4
    data = make_dataset()
    data.policy_versions[:, 0] = 1
    data.policy_versions[:, 1:] = 3
    data.policy_ids[:, 3] = 1  # another policy's trajectory: not in the lag statistics
    data.policy_versions[:, 3] = -50
    stats = _train(learner, data)
    for key in (
        "policy_lag/min",
        "policy_lag/mean",
        "policy_lag/max",
        "learner/lr",
        "learner/epsilon",
        "losses/td",
        "learner/grad_norm",
        "health/skipped_updates",
    ):
        assert key in stats, key
    assert (stats["policy_lag/min"], stats["policy_lag/max"]) == (1.0, 3.0)
    assert stats["policy_lag/mean"] == pytest.approx((3 + 1 + 1) / 3)
    assert stats["learner/lr"] == pytest.approx(1e-3)
    assert stats["learner/epsilon"] == pytest.approx(learner.model.epsilons(1, None, "cpu")[0])
    assert stats["health/skipped_updates"] == 0.0


def test_state_dict_round_trip_resumes_exactly(make_dataset):
    first = _learner(seed=0)
    _train(first, make_dataset(reward=1.0), seed=1)
    state = copy.deepcopy(first.state_dict())
    resumed = _learner(seed=7)  # other initial weights: all must come from the state
    resumed.load_state_dict(state)
    assert (resumed.env_steps, resumed.policy_version) == (first.env_steps, first.policy_version)
    a = _train(first, make_dataset(reward=1.0), seed=2)
    b = _train(resumed, make_dataset(reward=1.0), seed=2)
    assert a == b
    for k, v in _weights(first).items():
        assert torch.equal(v, _weights(resumed)[k]), k
    assert int(resumed.model.trained_env_steps) == first.env_steps


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_update_is_skipped_leaving_the_weights_untouched(make_dataset, bad):
    learner = _learner()
    _train(learner, make_dataset())  # optimizer state exists now
    before, version = _weights(learner), learner.policy_version
    stats = _train(learner, make_dataset(reward=bad))
    for k, v in before.items():
        if k != "trained_env_steps":
            assert torch.equal(v, _weights(learner)[k]), k
    assert learner.policy_version == version
    assert stats["health/skipped_updates"] == 4.0
    assert "losses/td" not in stats
    _train(learner, make_dataset())  # good updates afterwards still happen
    assert learner.policy_version == version + 4


def test_too_many_consecutive_skips_fail_with_a_clear_error(make_dataset):
    learner = _learner(max_consecutive_skipped_updates=3)
    with pytest.raises(NonFiniteTrainingError, match="3 updates in a row"):
        _train(learner, make_dataset(reward=float("nan")))


def test_unknown_hyperparameter_is_refused_and_known_ones_apply(make_dataset):
    learner = _learner()
    learner.set_hyperparameters({"learning_rate": 5e-4, "entropy_coeff": 0.1})
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    with pytest.raises(KeyError, match="clip_coeff"):
        learner.set_hyperparameters({"clip_coeff": 0.1})


@pytest.mark.parametrize(
    "horizon, expected", [(0, 1e-3 * (1 - 32 / 64)), (128, 1e-3 * (1 - 32 / 128))]
)
def test_linear_schedule_decays_over_lr_decay_env_steps_or_the_budget(
    make_dataset, horizon, expected
):
    # Each dataset is trained at the rate its env steps so far leave: 32 steps in, half a
    # 64-step budget, or a quarter of a 128-step horizon set past that budget.
    learner = _learner(lr_schedule="linear", train_for_env_steps=64, lr_decay_env_steps=horizon)
    _train(learner, make_dataset())
    _train(learner, make_dataset())
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
