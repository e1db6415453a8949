"""The runner's population logic (pbt/coordinator.py): PBT rounds become commands to the
learners and rollout workers, are logged, and survive a restart; frozen snapshots rotate."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sampleforge.comms.messages import (
    CopyPolicy,
    EpisodesFinished,
    PublishSnapshot,
    SetHyperparameters,
    SetRewardShaping,
    TrainingReport,
)
from sampleforge.config import make_config
from sampleforge.pbt import HISTORY_FILENAME, PbtHistory
from sampleforge.pbt.coordinator import PBT_STATE_FILENAME, PopulationCoordinator
from sampleforge.telemetry import PopulationEpisodeWindows


@dataclass
class FakeChannels:
    """The commands the coordinator sends, kept in order instead of queued."""

    num_policies: int
    num_workers: int = 1
    learners: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)

    def __post_init__(self):
        self.learners = {p: [] for p in range(self.num_policies)}
        self.workers = [[] for _ in range(self.num_workers)]

    def send_to_learner(self, policy_id: int, messages: list) -> None:
        self.learners[policy_id].extend(messages)

    def send_to_rollout_worker(self, worker: int, messages: list) -> None:
        self.workers[worker].extend(messages)

    def drain(self) -> dict[int, list]:
        sent, self.learners = self.learners, {p: [] for p in range(self.num_policies)}
        return sent


def _population(tmp_path, resume=False, **overrides):
    cfg = make_config(
        num_policies=4,
        with_pbt=True,
        pbt_period_env_steps=1000,
        seed=0,
        pbt_mutation_probability=1.0,
        **overrides,
    )
    wiring = FakeChannels(cfg.num_policies, cfg.num_workers)
    episodes = PopulationEpisodeWindows(cfg.num_policies)
    population = PopulationCoordinator(
        cfg, wiring, tmp_path, {"hit": 0.1}, resume=resume, episodes=episodes
    )
    return population, wiring


def _play(population, returns_by_policy):
    """Episodes reported as the runner does: into the run's windows, then to the coordinator."""
    for p, ret in returns_by_policy.items():
        msg = EpisodesFinished(p, [ret] * 10, [5] * 10)
        population.returns[p].add(msg.returns, msg.lengths)
        population.on_episodes(msg)


def test_a_pbt_round_copies_the_worst_from_the_best_and_sends_new_hyperparameters(tmp_path):
    population, wiring = _population(tmp_path)
    _play(population, {0: -5.0, 1: 1.0, 2: 2.0, 3: 9.0})
    population.step(999)
    assert all(not msgs for msgs in wiring.drain().values())  # not due yet
    population.step(1000)
    sent = wiring.drain()
    assert sent[0][0] == CopyPolicy(3)  # worst copies the best (N=4: one each)
    assert isinstance(sent[0][1], SetHyperparameters)
    # Mutation probability 1: the bottom 70% (policies 0 and 1) all change.
    for p in (0, 1):
        (update,) = [m for m in sent[p] if isinstance(m, SetHyperparameters)]
        assert update.values == {
            k: v
            for k, v in population.pbt.hyperparameters(p).items()
            if not k.startswith("shaping.")
        }
        assert update.values["learning_rate"] != pytest.approx(1e-3)
    assert not sent[3]  # the best policy is left alone
    for shaping in wiring.workers:
        assert {m.policy_id for m in shaping} == {0, 1}
        assert all(
            isinstance(m, SetRewardShaping) and set(m.coefficients) == {"hit"} for m in shaping
        )
    events = PbtHistory.read(tmp_path / HISTORY_FILENAME)
    assert [(e.kind, e.policy, e.source_policy) for e in events][0] == ("replace", 0, 3)


def _checkpoint(population, failed=()):
    """What the runner does for a checkpoint: ask, then hear every learner's answer."""
    population.checkpoint_requested()
    for p in range(population.cfg.num_policies):
        (population.checkpoint_failed if p in failed else population.checkpoint_written)(p)


def test_the_pbt_schedule_survives_a_restart(tmp_path):
    population, _ = _population(tmp_path)
    _play(population, {0: -5.0, 1: 1.0, 2: 2.0, 3: 9.0})
    assert population.step(1000)  # policy 0 copied policy 3: checkpoint now
    _checkpoint(population)
    before = {p: population.pbt.hyperparameters(p) for p in range(4)}
    resumed, wiring = _population(tmp_path, resume=True)
    assert (tmp_path / PBT_STATE_FILENAME).exists()
    assert resumed.pbt.rounds == 1 and not resumed.pbt.due(1500)
    assert {p: resumed.pbt.hyperparameters(p) for p in range(4)} == before
    resumed.send_current_hyperparameters()  # what a resumed runner does after starting
    sent = wiring.drain()
    assert all(isinstance(sent[p][0], SetHyperparameters) for p in range(4))


def test_win_rate_is_the_objective_when_the_env_reports_outcomes(tmp_path):
    population, _ = _population(tmp_path)
    population.on_episodes(EpisodesFinished(0, [5.0, 5.0], [3, 3], [0.0, 0.0]))
    population.on_episodes(EpisodesFinished(1, [-1.0, -1.0], [3, 3], [1.0, 0.5]))
    assert population.objective(0) == 0.0 and population.objective(1) == 0.75
    assert population.scalars()["policy_1/win_rate"] == 0.75


def test_frozen_snapshots_rotate_round_robin(tmp_path):
    cfg = make_config(num_policies=2, num_frozen_opponents=2, snapshot_every_env_steps=100, seed=0)
    wiring = FakeChannels(2, cfg.num_workers)
    population = PopulationCoordinator(
        cfg, wiring, tmp_path, {}, resume=False, episodes=PopulationEpisodeWindows(2)
    )
    published = []
    for steps in (50, 100, 150, 210, 320):
        population.step(steps)
        published += [
            m.frozen_policy
            for msgs in wiring.drain().values()
            for m in msgs
            if isinstance(m, PublishSnapshot)
        ]
    assert published == [2, 3, 2]  # at 100, 210 and 320 env steps


def test_per_policy_lag_and_sample_share(tmp_path):
    population, _ = _population(tmp_path)
    population.on_training(TrainingReport(0, 3000, 10, {}, 0.0, 2.5, 5.0))
    population.on_training(TrainingReport(1, 1000, 4, {}, 0.0, 1.5, 3.0))
    scalars = population.scalars()
    assert scalars["policy_0/lag_mean"] == 2.5 and scalars["policy_0/sample_share"] == 0.75
    assert scalars["policy_1/sample_share"] == 0.25
    assert "lag 2.5 share 75%" in population.summary_line()


def test_a_round_not_yet_checkpointed_runs_again_after_a_crash(tmp_path):
    """The PBT state on disk never runs ahead of the weights: until every learner has written
    the checkpoint that holds a round's copies, a resume starts from before that round."""
    population, _ = _population(tmp_path)
    _play(population, {0: -5.0, 1: 1.0, 2: 2.0, 3: 9.0})
    _checkpoint(population)  # before the round
    assert population.step(1000)
    population.checkpoint_requested()  # the round's checkpoint: policies 0-2 write, then a crash
    for p in range(3):
        population.checkpoint_written(p)
    resumed, _ = _population(tmp_path, resume=True)
    assert resumed.pbt.rounds == 0 and resumed.pbt.due(1000)


def test_the_state_of_a_failed_checkpoint_is_not_saved_and_later_ones_are(tmp_path):
    population, _ = _population(tmp_path)
    _play(population, {0: -5.0, 1: 1.0, 2: 2.0, 3: 9.0})
    assert population.step(1000)
    _checkpoint(population, failed={2})  # a full disk for policy 2
    assert not (tmp_path / PBT_STATE_FILENAME).exists()
    # Two requests in flight: answers come in order per learner, whichever learner is first.
    population.checkpoint_requested()
    assert not population.step(1500)  # not due
    population.checkpoint_requested()
    for p in (3, 1, 0, 2):
        population.checkpoint_written(p)
    assert _population(tmp_path, resume=True)[0].pbt.rounds == 1
    for p in range(4):
        population.checkpoint_written(p)
    assert _population(tmp_path, resume=True)[0].pbt.rounds == 1
