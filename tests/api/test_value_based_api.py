"""The Python API of the value-based algorithms (`DQN`, `Rainbow`, `QRDQN`, `IQN`, `FQF`,
`MDQN`, `PQN`): the same calls as `APPO`'s, on CartPole-v1. One asynchronous DQN run is trained
twice with the same processes; the other checks need no processes (serial mode, or none
started)."""

import numpy as np
import pytest
import torch

import sampleforge
from sampleforge import APPO, DQN, FQF, IQN, MDQN, PQN, QRDQN, Rainbow
from sampleforge.api import (
    ActorCriticAlgorithm,
    Algorithm,
    ContinuousControlAlgorithm,
    ValueBasedAlgorithm,
)
from sampleforge.config import ConfigError
from sampleforge.config.algorithms import ALGORITHM_FAMILIES
from sampleforge.evaluation import save_model_file
from sampleforge.models.q_policy import QPolicy
from sampleforge.testing.processes import is_alive

pytestmark = pytest.mark.timeout(180)

FAST = dict(report_every_sec=60, tensorboard=False, device="cpu")
# A light replay ratio and an early start: seconds of training, not learning.
LIGHT = dict(learning_starts=200, samples_per_insert=2.0, **FAST)
VALUE_CLASSES = (DQN, Rainbow, QRDQN, IQN, FQF, MDQN, PQN)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _all_classes(base: type) -> list[type]:
    found = []
    for sub in base.__subclasses__():
        found += [sub] if "algorithm" in sub.__dict__ else []
        found += _all_classes(sub)
    return found


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("api_dqn")
    with DQN("CartPole-v1", num_workers=1, seed=1, train_dir=str(train_dir), **LIGHT) as m:
        yield m


@pytest.fixture(scope="module")
def trained(model):
    first = model.train(1_500)
    pids = dict(model.runner.host.pids())
    second = model.train(1_000)
    return first, second, pids


def _serial_dqn(tmp_path, **overrides) -> DQN:
    return DQN(
        "CartPole-v1",
        serial_mode=True,
        num_envs_per_worker=4,
        seed=2,
        train_dir=str(tmp_path),
        **LIGHT,
        **overrides,
    )


def test_every_algorithm_has_one_class_exported_by_the_package():
    classes = {cls.algorithm: cls for cls in _all_classes(Algorithm)}
    assert set(classes) == set(ALGORITHM_FAMILIES)
    assert len(_all_classes(Algorithm)) == len(classes)  # one class per name
    assert set(sampleforge._API_NAMES) == {cls.__name__ for cls in classes.values()}
    for cls in classes.values():
        assert getattr(sampleforge, cls.__name__) is cls
        kind = {
            "actor_critic": ActorCriticAlgorithm,
            "continuous_control": ContinuousControlAlgorithm,
        }.get(ALGORITHM_FAMILIES[cls.algorithm], ValueBasedAlgorithm)
        assert issubclass(cls, kind)


@pytest.mark.parametrize("cls", VALUE_CLASSES)
def test_each_value_based_class_builds_its_algorithm_s_q_policy(cls, tmp_path):
    with cls("CartPole-v1", train_dir=str(tmp_path), **FAST) as m:
        assert m.cfg.algorithm == cls.algorithm and not m.runner.started
        assert m.cfg.with_pbt is False
        assert isinstance(m._policy(0, refresh=False).model, QPolicy)


def test_train_again_keeps_processes_and_counters(model, trained):
    first, second, pids = trained
    assert pids and all(is_alive(pid) for pid in pids.values())
    assert model.runner.host.pids() == pids  # paused in between, not respawned
    assert first.env_steps >= 1_500 and first.stopped_because == "train_for_env_steps"
    assert second.env_steps >= first.env_steps + 1_000
    assert model.env_steps == second.env_steps


def test_predict_and_evaluate_a_q_policy(model, trained):
    action, state = model.predict(np.zeros(4, dtype=np.float32), deterministic=True)
    assert action in (0, 1) and state is None
    actions, _ = model.predict(np.zeros((5, 4)))
    assert actions.shape == (5,) and set(actions.tolist()) <= {0, 1}
    result = model.evaluate(2, seed=5)
    assert result.num_episodes == 2
    assert result.returns == tuple(float(n) for n in result.lengths)  # CartPole: +1 per step
    assert model.evaluate(2, seed=5, num_envs=1) == result


def test_parameters_round_trip_and_reach_the_learner(model, trained, tmp_path):
    params = model.get_parameters()
    assert "trained_env_steps" in params[0]  # the exploration schedule travels with them
    with _serial_dqn(tmp_path) as other:
        assert not _equal(other.get_parameters()[0], params[0])
        other.set_parameters(params)
        assert _equal(other.get_parameters()[0], params[0])  # read back from the learner
        assert other.evaluate(2, seed=3) == model.evaluate(2, seed=3)
        other.train(300)  # the learner goes on from them
        assert other.env_steps >= 300
    with pytest.raises(ValueError, match="do not fit"):
        model.set_parameters({0: {"network.head.weight": torch.zeros(1, 4)}})


def test_save_then_load_gives_the_same_greedy_returns(model, trained, tmp_path):
    path = model.save(tmp_path / "dqn.pt")
    loaded = DQN.load(path, train_dir=str(tmp_path))
    try:
        assert not loaded.runner.started
        assert loaded.evaluate(2, seed=11) == model.evaluate(2, seed=11)
        assert _equal(loaded.get_parameters()[0], model.get_parameters()[0])
    finally:
        loaded.close()
    with pytest.raises(ValueError, match="dqn model; load it with DQN.load, not Rainbow.load"):
        Rainbow.load(path)
    with pytest.raises(ValueError, match="load it with DQN.load, not APPO.load"):
        APPO.load(path)


def test_loading_with_the_wrong_class_names_the_right_one(tmp_path):
    with Rainbow("CartPole-v1", train_dir=str(tmp_path), **FAST) as m:
        weights = m._policy(0, refresh=False).model.state_dict()  # no process started
        path = save_model_file(tmp_path / "rainbow.pt", m.cfg, {0: weights}, 0)
    with pytest.raises(ValueError, match="rainbow model; load it with Rainbow.load, not DQN"):
        DQN.load(path, train_dir=str(tmp_path))


def test_a_value_based_class_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ConfigError, match="algorithm 'qrdqn' cannot act in env 'Pendulum-v1'"):
        QRDQN("Pendulum-v1", train_dir=str(tmp_path), **FAST)
    with pytest.raises(ConfigError, match="with_pbt: algorithm 'iqn' does not support"):
        IQN("CartPole-v1", with_pbt=True, num_policies=2, train_dir=str(tmp_path), **FAST)
    assert not any(tmp_path.iterdir())  # refused before its folder was made


def test_close_leaves_no_process(model, trained):
    """Last in this module: it closes the shared model."""
    pids = list(model.runner.host.pids().values())
    model.close()
    assert not any(is_alive(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        model.train(1_000)
