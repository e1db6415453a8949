"""compute_costs (bench/measure.py) measures what training runs: the env as a rollout worker
steps it, and the model on the training device."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from sampleforge.bench import measure
from sampleforge.config import make_config
from sampleforge.envs.registry import resolve_env


class _FakeSplit:
    """Stands in for an EnvPool split: records how it was built and how it is stepped."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        _FakeSplit.built.append(kwargs)
        self.num_rows = kwargs["num_envs"]
        self.steps = 0
        self.closed = False

    def reset_all(self, next_obs):
        assert next_obs["obs"].shape[0] == self.num_rows

    def step(self, actions, targets):
        assert actions.shape == (self.num_rows, 1) and targets.rewards.shape == (self.num_rows,)
        self.steps += 1

    def close(self):
        self.closed = True


def test_an_envpool_env_is_measured_with_the_batch_of_one_training_split(monkeypatch):
    monkeypatch.setattr(measure, "is_envpool_spec", lambda spec: True)
    monkeypatch.setattr(measure, "make_env_split", lambda **kw: _FakeSplit(**kw))
    _FakeSplit.built = []
    cfg = make_config(env="CartPole-v1", num_envs_per_worker=24, worker_num_splits=2)
    stepper = measure._EnvStepper(cfg, resolve_env("CartPole-v1"))
    seconds_per_step = stepper(0.05)
    stepper.close()
    (built,) = _FakeSplit.built
    assert built["num_envs"] == 12  # 24 envs in 2 splits, as a rollout worker has them
    assert stepper.split.steps > 0 and stepper.split.closed
    assert seconds_per_step > 0 and np.isfinite(seconds_per_step)


def test_other_envs_are_stepped_one_by_one_as_in_a_rollout_worker():
    cfg = make_config(env="CartPole-v1")
    stepper = measure._EnvStepper(cfg, resolve_env("CartPole-v1"))
    assert stepper.split is None and 0 < stepper(0.05) < 1e-3


def test_costs_say_where_the_model_was_measured():
    cfg = make_config(env="CartPole-v1", device="cpu")
    assert measure.compute_costs(cfg, 4, seconds=0.2, rounds=1).device == "cpu"


def test_a_value_based_learner_costs_an_update_per_its_share_of_inserts():
    cfg = make_config(
        env="CartPole-v1",
        algorithm="dqn",
        device="cpu",
        batch_size=32,
        samples_per_insert=4.0,
        mlp_hidden_sizes=[32],
    )
    costs = measure.compute_costs(cfg, 4, seconds=0.3, rounds=1)
    # An update samples 32 transitions, which the replay ratio allows per 8 inserted.
    assert costs.learner == pytest.approx(costs.sgd_step * 4.0 / 32)
    assert costs.sgd_steps_per_sample == pytest.approx(4.0 / 32)
    assert costs.learner > 0 and np.isfinite(costs.learner)


def test_the_learner_is_measured_on_one_core_without_its_bootstrap_thread(monkeypatch):
    seen = []
    original = measure.make_training_probe

    def probe(cfg, observation_space, action_space, device, frame_stacked_keys):
        seen.append((cfg.learner_bootstrap_thread, cfg.algorithm, torch.get_num_threads()))
        return original(cfg, observation_space, action_space, device, frame_stacked_keys)

    monkeypatch.setattr(measure, "make_training_probe", probe)
    cfg = make_config(
        env="CartPole-v1", algorithm="dqn", device="cpu", learner_bootstrap_thread=True
    )
    measure.compute_costs(cfg, 4, seconds=0.2, rounds=1)
    assert seen == [(False, "dqn", 1)]


@pytest.mark.gpu
def test_model_costs_are_measured_on_the_training_gpu(monkeypatch):
    seen = []
    original = measure.make_training_probe

    def probe(cfg, observation_space, action_space, device, frame_stacked_keys):
        seen.append(device.type)
        return original(cfg, observation_space, action_space, device, frame_stacked_keys)

    monkeypatch.setattr(measure, "make_training_probe", probe)
    cfg = make_config(env="CartPole-v1", device="cuda")
    costs = measure.compute_costs(cfg, 32, seconds=0.5, rounds=1)
    assert costs.device.startswith("cuda") and seen == ["cuda"]
    assert torch.cuda.is_available()


def test_the_learner_limit_is_what_the_learners_alone_take_in():
    from sampleforge.bench.measure import ComputeCosts

    costs = ComputeCosts(env_step=80e-6, inference=90e-6, learner=16e-3, inference_batch_size=2)
    assert costs.learner_limit_fps(1, frameskip=1) == 62.5
    assert costs.learner_limit_fps(2, frameskip=4) == 500.0


def test_the_actors_cpu_is_read_per_process_and_counts_their_children():
    # A worker that starts a child burning about 0.4 s of CPU; both then wait to be killed.
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {burn + 'time.sleep(60)'!r}])\n"
        "time.sleep(60)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        pids = {"rollout_worker_0": worker.pid, "learner_p0": 1}
        actors = measure._component_pids(pids, measure._ACTOR_COMPONENTS)
        assert actors == [worker.pid]  # the learner is not an actor
        assert measure._component_pids(pids, measure._LEARNER_COMPONENTS) == [1]
        deadline, used = time.monotonic() + 20, 0.0
        while used < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
            used = measure._cpu_seconds(actors) or 0.0
        assert 0.4 <= used < 3.0, used  # the child's CPU, counted under the worker
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def test_components_inside_this_process_give_no_actor_cpu():
    # Serial mode: every component runs in the runner's process, whose CPU is not the actors'.
    pids = {"rollout_worker_0": os.getpid(), "learner_p0": os.getpid()}
    assert measure._component_pids(pids, measure._ACTOR_COMPONENTS) is None
    assert measure._component_pids(pids, measure._LEARNER_COMPONENTS) is None
    assert measure._cpu_seconds(None) is None
