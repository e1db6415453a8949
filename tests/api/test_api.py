"""The Python API on CartPole-v1: repeated training with the same processes, parameters in and
out, predict, evaluate, save and load, callbacks, and shutdown leaving no process behind.

One asynchronous model (2 rollout workers, inference worker, learner in their own processes) is
shared by the tests of this module that only read from it or train it further; tests that need
a model of their own use serial mode (no processes) where processes are beside the point.
"""

import gc
import math
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge import A3C, APPO, IMPALA
from sampleforge.checkpoint import CheckpointStore
from sampleforge.components.runner import TrainingError
from sampleforge.config import ConfigError
from sampleforge.envs import EnvContext, UnknownEnvError
from sampleforge.telemetry import TrainingStatus
from sampleforge.testing import register_faulty_env
from sampleforge.testing.processes import is_alive

pytestmark = pytest.mark.timeout(180)

FAST = dict(report_every_sec=60, tensorboard=False, device="cpu")


def make_cartpole(context: EnvContext) -> gym.Env:
    """A top-level env factory: worker processes import it by name."""
    return gym.make("CartPole-v1", render_mode=context.render_mode)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("api")
    with APPO("CartPole-v1", num_workers=2, seed=1, train_dir=str(train_dir), **FAST) as m:
        yield m


@pytest.fixture(scope="module")
def trained(model):
    """The shared model after two train calls: (first summary, second summary, pids)."""
    first = model.train(10_000)
    pids = dict(model.runner.host.pids())
    second = model.train(10_000)
    return first, second, pids


def _serial_model(tmp_path, **overrides):
    return APPO(
        "CartPole-v1",
        serial_mode=True,
        num_envs_per_worker=4,
        seed=2,
        train_dir=str(tmp_path),
        **FAST,
        **overrides,
    )


def test_train_again_keeps_processes_and_counters(model, trained):
    first, second, pids = trained
    assert len(pids) == 4 and all(is_alive(pid) for pid in pids.values())
    assert model.runner.host.pids() == pids  # paused in between, not respawned
    assert first.env_steps >= 10_000 and first.stopped_because == "train_for_env_steps"
    assert second.env_steps >= first.env_steps + 10_000
    assert second.env_steps < first.env_steps + 10_000 + 5_000  # one call trains what it asked
    assert model.env_steps == second.env_steps
    for summary in (first, second):
        assert summary.mean_fps > 0 and summary.mean_return_last_100 is not None
        assert summary.mean_policy_lag is not None


def test_predict_single_and_batch(model, trained):
    action, state = model.predict(np.zeros(4, dtype=np.float32))
    assert isinstance(action, int) and action in (0, 1) and state is None
    actions, state = model.predict(np.zeros((5, 4)), deterministic=True)
    assert actions.shape == (5,) and state is None
    assert set(actions.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"expected \(4,\)"):
        model.predict(np.zeros(3))


def test_evaluate_returns_per_episode_repeatably(model, trained):
    result = model.evaluate(2, seed=5)
    assert result.num_episodes == 2 and len(result.lengths) == 2
    assert all(1 <= n <= 500 for n in result.lengths)
    assert result.returns == tuple(float(n) for n in result.lengths)  # CartPole: +1 per step
    assert model.evaluate(2, seed=5, num_envs=1) == result  # episode i's seed is fixed


def test_get_and_set_parameters_round_trip(model, trained, tmp_path):
    params = model.get_parameters()
    assert list(params) == [0]
    with _serial_model(tmp_path) as other:
        assert not _equal(other.get_parameters()[0], params[0])
        other.set_parameters(params)
        assert _equal(other.get_parameters()[0], params[0])  # read back from the learner
        assert other.evaluate(2, seed=3) == model.evaluate(2, seed=3)
        model.set_parameters(other.get_parameters())  # and into the async model
        assert _equal(model.get_parameters()[0], params[0])


def test_set_parameters_from_checkpoint_path(model, trained, tmp_path):
    latest = CheckpointStore(model.experiment_dir / "checkpoints" / "p0").latest()
    saved = CheckpointStore(latest.parent).load(latest)["model"]
    with _serial_model(tmp_path) as other:
        other.set_parameters({0: latest})
        assert _equal(other.get_parameters()[0], saved)


def test_set_parameters_rejects_bad_input(model, trained):
    with pytest.raises(ValueError, match="policy id 1"):
        model.set_parameters({1: model.get_parameters()[0]})
    with pytest.raises(ValueError, match="do not fit"):
        model.set_parameters({0: {"value_head.weight": torch.zeros(1, 64)}})
    weights = model.get_parameters()[0]
    name = next(iter(weights))
    weights[name][0] = float("nan")  # once published, then failing the learner and inference
    with pytest.raises(ValueError, match=f"policy 0: {name} holds non-finite values"):
        model.set_parameters({0: weights})
    assert model.train(1_000).stopped_because == "train_for_env_steps"


def test_a_failed_start_closes_the_model_and_a_closed_model_refuses_every_change(tmp_path):
    """A failed start released the experiment's lock: the object once started again on it,
    beside a second object on the same experiment, two runs writing one folder."""
    env = register_faulty_env("api_broken_init", fault="raise_in_init_in_workers")
    broken = APPO(env, num_workers=1, num_envs_per_worker=2, train_dir=str(tmp_path), **FAST)
    with pytest.raises(TrainingError, match="could not be created in worker"):
        broken.train(1_000)
    with pytest.raises(RuntimeError, match="APPO is closed"):
        broken.train(1_000)
    for change in (
        lambda: broken.set_parameters({0: {}}),
        lambda: broken.set_hyperparameters({"learning_rate": 1e-4}),
    ):
        with pytest.raises(RuntimeError, match="APPO is closed"):
            change()


def test_save_then_load_gives_same_returns(model, trained, tmp_path):
    path = model.save(tmp_path / "cartpole.pt")
    loaded = APPO.load(path, train_dir=str(tmp_path))
    try:
        assert not loaded.runner.started  # weights only: nothing started to evaluate
        assert loaded.evaluate(2, seed=11) == model.evaluate(2, seed=11)
        assert _equal(loaded.get_parameters()[0], model.get_parameters()[0])
    finally:
        loaded.close()
    with pytest.raises(ValueError, match="appo model; load it with APPO.load"):
        IMPALA.load(path)


def test_callback_sees_status_and_stops_training(model, trained):
    seen: list[TrainingStatus] = []

    def stop_after_5000(status: TrainingStatus) -> bool:
        seen.append(status)
        return status.env_steps_this_call < 5_000

    summary = model.train(1_000_000, callback=stop_after_5000)
    assert summary.stopped_because == "callback"
    assert seen and seen[-1].env_steps_this_call >= 5_000
    assert summary.env_steps - trained[1].env_steps < 100_000
    assert seen[-1].policy_versions[0] > 0 and "losses/policy" in seen[-1].learner_stats

    # Env steps arrive a learner dataset (2,048 samples by default) at a time, two when the
    # learner catches up after a pause: train several datasets' worth.
    marks: list[int] = []
    model.train(
        16_000, callback=lambda s: marks.append(s.env_steps), callback_every_env_steps=4_000
    )
    assert len(marks) >= 2 and marks == sorted(marks)


def test_a_callback_that_raises_leaves_the_run_paused_and_trainable(model, trained):
    """The callback's error propagates, and nothing trains on behind the caller's back (the
    components once went on sampling and training, unpaused and unread, until the next call
    or the report queue filled)."""

    class CallbackFailed(Exception):
        pass

    def fails(status: TrainingStatus) -> None:
        if status.env_steps_this_call >= 4_000:
            raise CallbackFailed

    with pytest.raises(CallbackFailed):
        model.train(1_000_000, callback=fails)
    time.sleep(1.0)  # a dataset in training when the error came may still finish
    before = model.get_parameters()[0]
    time.sleep(2.0)
    assert _equal(model.get_parameters()[0], before)
    steps = model.env_steps
    summary = model.train(4_000)
    assert summary.stopped_because == "train_for_env_steps"
    assert steps + 4_000 <= summary.env_steps < steps + 40_000


def test_collected_model_stops_its_workers(tmp_path):
    # A top-level env function reaches the spawned workers by reference.
    m = A3C(make_cartpole, num_workers=1, num_envs_per_worker=4, train_dir=str(tmp_path), **FAST)
    m.train(1_000)
    pids = list(m.runner.host.pids().values())
    assert len(pids) == 3 and all(is_alive(p) for p in pids)
    del m
    gc.collect()
    assert not any(is_alive(p) for p in pids)


def test_every_config_field_is_a_keyword_validated_like_the_cli(tmp_path):
    with pytest.raises(ConfigError) as err:
        APPO("CartPole-v1", num_workers=0, gamma=2, train_dir=str(tmp_path))
    assert len(err.value.problems) == 2
    assert "num_workers: 0 must be >= 1" in str(err.value)
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        APPO("CartPole-v1", learning_rat=0.1, train_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="algorithm: set by the class"):
        APPO("CartPole-v1", algorithm="a3c", train_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="policy_kwargs: unknown setting 'layers'"):
        APPO("CartPole-v1", policy_kwargs={"layers": 2}, train_dir=str(tmp_path))
    with pytest.raises(UnknownEnvError, match="CartPole-v1"):
        APPO("CartPol-v1", train_dir=str(tmp_path))


@pytest.mark.parametrize("seconds", [-1, 0, float("nan"), "x", True])
def test_a_bad_time_budget_is_refused_before_anything_starts(tmp_path, seconds):
    """`seconds='x'` once failed as a TypeError after every process had started, and -1
    trained nothing, silently."""
    model = APPO("CartPole-v1", train_dir=str(tmp_path), **FAST)
    try:
        with pytest.raises(ValueError, match=f"seconds: {seconds!r} must be a number > 0"):
            model.train(1_000, seconds=seconds)
        assert not model.runner.started
    finally:
        model.close()


def test_the_env_family_applies_unless_a_keyword_says_otherwise(tmp_path):
    from sampleforge.config.families import family_settings
    from sampleforge.config.sources import config_sources

    atari = family_settings("atari")
    with APPO("atari_breakout", train_dir=str(tmp_path)) as m:
        for name in ("num_envs_per_worker", "num_workers", "encoder", "num_epochs"):
            assert getattr(m.cfg, name) == atari[name], name
            assert config_sources(m.cfg)[name] == "family", name
    with APPO(
        "atari_breakout", num_envs_per_worker=4, encoder="conv_simple", train_dir=str(tmp_path)
    ) as m:
        assert m.cfg.num_envs_per_worker == 4 and m.cfg.encoder == "conv_simple"
        assert config_sources(m.cfg)["num_envs_per_worker"] == "flag"


def test_model_settings_and_algorithm(tmp_path):
    with IMPALA(
        "CartPole-v1",
        policy_kwargs={"mlp_hidden_sizes": (32,), "rnn": "gru", "rnn_size": 16},
        serial_mode=True,
        train_dir=str(tmp_path),
        **FAST,
    ) as m:
        assert m.cfg.algorithm == "impala" and m.cfg.mlp_hidden_sizes == (32,)
        assert math.isinf(m.cfg.stop_at_mean_return)  # train(n) trains n steps
        action, state = m.predict(np.zeros(4))
        assert state.shape == (16,)
        actions, states = m.predict(np.zeros((3, 4)), state=np.zeros((3, 16)))
        assert actions.shape == (3,) and states.shape == (3, 16)


def test_a_lambda_env_needs_serial_mode(tmp_path):
    with pytest.raises(ValueError, match="top-level function"):
        APPO(lambda: gym.make("CartPole-v1"), train_dir=str(tmp_path))
    with APPO(
        lambda: gym.make("CartPole-v1"),
        serial_mode=True,
        num_envs_per_worker=2,
        train_dir=str(tmp_path),
        **FAST,
    ) as m:
        assert m.train(1_000).env_steps >= 1_000


def test_close_leaves_no_process(model, trained):
    """Last in this module: it closes the shared model."""
    pids = list(model.runner.host.pids().values())
    assert all(is_alive(p) for p in pids)
    model.close()
    model.close()  # twice is fine
    assert not any(is_alive(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        model.train(1_000)
