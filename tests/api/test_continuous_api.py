"""The Python API of the continuous-control algorithms (`DDPG`, `TD3`, `SAC`, `CrossQ`): the
same calls as `APPO`'s, on Pendulum-v1, in serial mode (one process, exactly repeatable)."""

import numpy as np
import pytest
import torch

from sampleforge import DDPG, SAC, TD3, CrossQ
from sampleforge.config import ConfigError
from sampleforge.models.continuous_policy import ContinuousPolicy

pytestmark = pytest.mark.timeout(180)

FAST = dict(report_every_sec=60, tensorboard=False, device="cpu")
# Small networks, a light replay ratio and an early start: seconds of training, not learning.
LIGHT = dict(
    learning_starts=200,
    random_action_steps=200,
    samples_per_insert=16.0,
    batch_size=32,
    mlp_hidden_sizes=[32, 32],
    critic_hidden_sizes=[32, 32],
    **FAST,
)
CLASSES = (DDPG, TD3, SAC, CrossQ)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _serial(cls, tmp_path, seed=1, **overrides):
    return cls(
        "Pendulum-v1",
        serial_mode=True,
        num_envs_per_worker=2,
        seed=seed,
        train_dir=str(tmp_path),
        **{**LIGHT, **overrides},
    )


@pytest.mark.parametrize("cls", CLASSES)
def test_each_class_builds_its_algorithm_s_actor(cls, tmp_path):
    with cls("Pendulum-v1", train_dir=str(tmp_path), **FAST) as m:
        assert m.cfg.algorithm == cls.algorithm and not m.runner.started
        model = m._policy(0, refresh=False).model
        assert isinstance(model, ContinuousPolicy)
        gaussian = cls in (SAC, CrossQ)
        assert (model.actor.log_std is not None) == gaussian


@pytest.mark.parametrize("cls", [SAC])  # TD3 shares every call; its learner: unit tests
def test_train_twice_predict_evaluate_and_parameters_round_trip(cls, tmp_path):
    with _serial(cls, tmp_path / "a") as model:
        first = model.train(600)
        second = model.train(400)
        assert second.env_steps >= first.env_steps + 400
        action, state = model.predict(np.zeros(3, dtype=np.float32), deterministic=True)
        assert action.shape == (1,) and state is None and abs(float(action[0])) <= 2.0
        explored, _ = model.predict(np.zeros((64, 3), dtype=np.float32))
        assert explored.shape == (64, 1) and np.abs(explored).max() <= 2.0
        assert explored.std() > 0  # exploration: not one action for one observation
        result = model.evaluate(2, seed=5)
        assert result.num_episodes == 2 and result.lengths == (200, 200)
        params = model.get_parameters()
        with _serial(cls, tmp_path / "b", seed=2) as other:
            assert not _equal(other.get_parameters()[0], params[0])
            other.set_parameters(params)
            assert _equal(other.get_parameters()[0], params[0])  # read back from the learner
            assert other.evaluate(2, seed=3) == model.evaluate(2, seed=3)
            other.train(300)  # the learner goes on from them
            assert other.env_steps >= 300
        path = model.save(tmp_path / "policy.pt")
        loaded = cls.load(path, train_dir=str(tmp_path))
        try:
            assert loaded.evaluate(2, seed=11) == model.evaluate(2, seed=11)
        finally:
            loaded.close()


def test_a_continuous_class_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ConfigError, match="algorithm 'sac' cannot act in env 'CartPole-v1'"):
        SAC("CartPole-v1", train_dir=str(tmp_path), **FAST)
    with pytest.raises(ConfigError, match="with_pbt: algorithm 'td3' does not support"):
        TD3("Pendulum-v1", with_pbt=True, num_policies=2, train_dir=str(tmp_path), **FAST)


def test_train_stops_on_time_while_the_replay_is_still_filling(tmp_path):
    # Before learning_starts no update reports the env steps: the learner says them anyway,
    # so a train(n) shorter than the warm-up ends at n rather than where learning starts.
    with _serial(SAC, tmp_path, learning_starts=3_000) as model:
        summary = model.train(1_000)
        assert summary.stopped_because == "train_for_env_steps"
        assert 1_000 <= summary.env_steps < 1_500, summary
        assert model.get_parameters()[0]["trained_env_steps"] == 0  # no update yet
        assert model.train(2_500).env_steps >= 3_500
