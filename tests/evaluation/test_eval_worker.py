"""Evaluation during training: the evaluation worker evaluates a frozen copy of the published
weights and keeps the best; the runner's hook schedules requests and logs eval/ metrics."""

import csv
import logging
import time

import gymnasium as gym
import pytest
import torch

from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.checkpoint import CheckpointStore
from sampleforge.comms.eval_messages import EvaluationFinished, EvaluationRequested
from sampleforge.comms.messages import Stop
from sampleforge.comms.queues import make_queue, receive, send_many
from sampleforge.components.eval_worker import EvaluationEndpoints, EvaluationWorker
from sampleforge.components.runner import Runner
from sampleforge.config import ConfigError, make_config
from sampleforge.envs import resolve_env
from sampleforge.evaluation import LocalPolicy, run_episodes
from sampleforge.evaluation.schedule import TrainingEvaluation
from sampleforge.models.factory import make_actor_critic


def _worker(tmp_path, cfg, weights):
    env = gym.make("CartPole-v1")
    inbox, reports = make_queue(), make_queue()
    endpoints = EvaluationEndpoints(weights=weights, inbox=inbox, report_queue=reports)
    worker = EvaluationWorker(
        cfg=cfg,
        policy_id=0,
        endpoints=endpoints,
        env_spec=resolve_env("CartPole-v1"),
        observation_space=env.observation_space,
        action_space=env.action_space,
        best_dir=str(tmp_path / "best"),
    )
    return worker, inbox, reports


def _wait_for_report(worker, reports, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.poll(0.01)
        found = [m for m in receive(reports, 0.0) if isinstance(m, EvaluationFinished)]
        if found:
            return found[0]
    raise AssertionError("no EvaluationFinished")


def test_worker_evaluates_published_weights_and_keeps_the_best(tmp_path):
    cfg = make_config(seed=4, eval_episodes=3)
    env = gym.make("CartPole-v1")
    model = make_actor_critic(cfg, env.observation_space, env.action_space)
    weights = SharedPolicyWeights(model_numel(model))
    weights.publish(model, version=7)
    worker, inbox, reports = _worker(tmp_path, cfg, weights)
    send_many(inbox, [EvaluationRequested(policy_id=0, env_steps=1234)])
    report = _wait_for_report(worker, reports)
    assert report.env_steps == 1234 and report.policy_version == 7 and len(report.returns) == 3
    expected = run_episodes(
        LocalPolicy(
            model=model, observation_space=env.observation_space, action_space=env.action_space
        ),
        resolve_env("CartPole-v1"),
        3,
        seed=4,
    )
    assert tuple(report.returns) == expected.returns  # the same episodes, the same weights
    assert report.best_path == str(tmp_path / "best" / "best.pt")
    best = CheckpointStore(tmp_path / "best").load(tmp_path / "best" / "best.pt")
    assert all(torch.equal(best["model"][k], v) for k, v in model.state_dict().items())

    send_many(inbox, [EvaluationRequested(policy_id=0, env_steps=2000)])
    again = _wait_for_report(worker, reports)
    assert again.returns == report.returns and again.best_path is None  # not better
    send_many(inbox, [Stop()])
    worker.poll(0.01)
    assert not worker.running


class _Writer:
    def __init__(self):
        self.rows = []

    def write(self, env_steps, scalars):
        self.rows.append((env_steps, scalars))


def test_hook_requests_one_evaluation_per_mark_and_records_it():
    inbox = make_queue()
    hook = TrainingEvaluation(every_env_steps=1000, inboxes={0: inbox})
    hook.maybe_request(999)
    assert receive(inbox, 0.0) == []
    hook.maybe_request(1500)
    hook.maybe_request(2600)  # still in flight: skipped
    assert receive(inbox, 0.0) == [EvaluationRequested(0, 1500)]
    writer = _Writer()
    hook.on_finished(EvaluationFinished(0, 1500, 3, [1.0, 3.0], [1, 3], 0.5), writer)
    assert writer.rows == [
        (
            1500,
            {
                "eval/return_mean": 2.0,
                "eval/return_std": 1.0,
                "eval/return_min": 1.0,
                "eval/return_max": 3.0,
                "eval/length_mean": 2.0,
                "eval/policy_version": 3.0,
                "eval/seconds": 0.5,
            },
        )
    ]
    hook.maybe_request(2400)  # the next mark is 1500 + 1000
    assert receive(inbox, 0.0) == []
    hook.maybe_request(2600)
    assert receive(inbox, 0.0) == [EvaluationRequested(0, 2600)]


def test_eval_settings_are_validated():
    with pytest.raises(ConfigError) as err:
        make_config(eval_every_env_steps=0, eval_episodes=0)
    assert len(err.value.problems) == 2


@pytest.mark.timeout(120)
def test_training_with_evaluation_logs_eval_metrics_and_saves_the_best(tmp_path):
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment="with_eval",
        serial_mode=True,
        num_envs_per_worker=4,
        seed=1,
        eval_every_env_steps=1500,
        eval_episodes=2,
        train_for_env_steps=5_000,
        stop_at_mean_return="inf",
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
    )
    with Runner(cfg) as runner:
        runner.train()
        deadline = time.monotonic() + 20
        while runner.evaluation.last.get(0) is None and time.monotonic() < deadline:
            runner._pump(wait_for_reports=0.1)
    with open(tmp_path / "with_eval" / "progress.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("eval/return_mean")]
    assert rows, "no eval/ metrics in progress.csv"
    assert float(rows[0]["env_steps"]) >= 1500 and float(rows[0]["eval/return_mean"]) > 0
    assert (tmp_path / "with_eval" / "eval" / "p0" / "best.pt").is_file()


def test_stop_on_evaluation_needs_evaluations():
    with pytest.raises(ConfigError, match="stop_on 'evaluation' .* needs eval_every_env_steps"):
        make_config(stop_on="evaluation")


def _stop_on_evaluation_run(tmp_path, name: str, eval_every_env_steps: int, caplog):
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment=name,
        serial_mode=True,
        num_envs_per_worker=4,
        seed=1,
        eval_every_env_steps=eval_every_env_steps,
        eval_episodes=2,
        stop_on="evaluation",
        stop_at_mean_return=5.0,  # every CartPole episode lasts at least 8 steps
        train_for_env_steps=4_000,
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
    )
    with caplog.at_level(logging.WARNING):
        with Runner(cfg) as runner:
            summary = runner.train()
    assert "no exact-resume snapshot" not in caplog.text  # the evaluation worker has its state
    return summary


@pytest.mark.timeout(120)
def test_stop_on_evaluation_stops_at_an_evaluation_that_reaches_the_target(tmp_path, caplog):
    """stop_at_mean_return judged on evaluations: the run stops once one reaches it (and
    only then: 100 training episodes over the target do not stop it), and the summary
    carries the best evaluation."""
    summary = _stop_on_evaluation_run(tmp_path, "evaluated", 1_000, caplog)
    assert summary.stopped_because == "stop_at_mean_return"
    assert summary.best_eval_return is not None and summary.best_eval_return >= 5.0
    assert 1_000 <= summary.env_steps < 4_000
    never_evaluated = _stop_on_evaluation_run(tmp_path, "never_evaluated", 1_000_000, caplog)
    assert never_evaluated.stopped_because == "train_for_env_steps"  # 100+ episodes of 8+
    assert never_evaluated.best_eval_return is None
