"""A learner worker alone, with its neighbours played by the test.

The test fills slots of a real shared trajectory buffer as a rollout worker would, sends the
`TrajectoryReady` messages and runner commands to the learner's inbox, and reads what comes back:
training reports, published weights, returned slots and checkpoints.
"""

import errno

import numpy as np
import pytest
import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.checkpoint.store import CheckpointStore, checkpoint_info
from sampleforge.comms.messages import (
    CheckpointFailed,
    CheckpointSaved,
    HandOverCheck,
    LearnerReady,
    Pause,
    Resume,
    SaveCheckpoint,
    TrainingReport,
    TrajectoryReady,
)
from sampleforge.comms.queues import make_queue, receive, send_many
from sampleforge.components.learner_worker import STAGER_KEY, LearnerEndpoints, LearnerWorker
from sampleforge.components.wiring import trajectory_layout
from sampleforge.config import make_config
from sampleforge.envs.registry import env_info
from sampleforge.learners.actor_critic import NonFiniteTrainingError
from sampleforge.learners.dataset_sizer import WINDOW
from sampleforge.models.factory import make_policy_model
from sampleforge.testing.exact_state import exactly_equal
from sampleforge.testing.fake_clock import FakeClock


class Neighbours:
    """The queues and buffers around one learner, and helpers to play its neighbours."""

    def __init__(self, tmp_path, resume: bool = False, **overrides):
        settings = dict(
            env="CartPole-v1",
            num_workers=1,
            num_envs_per_worker=4,
            worker_num_splits=1,
            rollout=8,
            batch_size=64,
            num_batches_per_epoch=1,
            num_epochs=2,
            device="cpu",
            seed=0,
            train_dir=str(tmp_path),
        )
        self.cfg = make_config(**{**settings, **overrides})
        info = env_info("CartPole-v1")
        model = make_policy_model(self.cfg, info.observation_space, info.action_space)
        self.buffer = SharedTrajectoryBuffer(
            trajectory_layout(self.cfg, info, model.rnn_state_size)
        )
        self.ledger = SamplerLedger(1, self.buffer.layout.num_slots)
        self.free = make_queue()
        self.weights = {0: SharedPolicyWeights(model_numel(model))}
        self.inbox, self.reports = make_queue(), make_queue(4 << 20)
        self.checkpoint_dir = tmp_path / "checkpoints"
        endpoints = LearnerEndpoints(
            buffer=self.buffer,
            weights=self.weights,
            incoming_weights=SharedPolicyWeights(model_numel(model)),
            inbox=self.inbox,
            slots=SlotPool.create(self.ledger, self.free),
            report_queue=self.reports,
        )
        self.worker = LearnerWorker(
            cfg=self.cfg,
            policy_id=0,
            endpoints=endpoints,
            observation_space=info.observation_space,
            action_space=info.action_space,
            device=torch.device("cpu"),
            checkpoint_dir=str(self.checkpoint_dir),
            frameskip=1,
            resume=resume,
        )
        self._next_slot = 0
        self.rng = np.random.default_rng(0)

    def finished_slot(self) -> TrajectoryReady:
        """Fill the next slot with a plausible rollout by policy 0 and hand it over."""
        slot, b = self._next_slot, self.buffer
        self._next_slot += 1
        b.obs["obs"][slot] = torch.from_numpy(self.rng.normal(size=b.obs["obs"][slot].shape))
        b.actions[slot] = torch.from_numpy(self.rng.integers(0, 2, b.actions[slot].shape))
        b.rewards[slot], b.dones[slot], b.valids[slot] = 1.0, 0, 1
        b.log_probs[slot], b.values[slot] = float(np.log(0.5)), 0.0
        b.policy_versions[slot], b.policy_ids[slot] = 0, 0
        self.ledger.hand_over(slot, [0], worker=0)
        return TrajectoryReady(policy_id=0, slot=slot, rows=None, worker=0)

    def a_dataset(self) -> list[TrajectoryReady]:
        slots = self.worker.stager.dataset_trajectories // self.buffer.layout.rows_per_slot
        return [self.finished_slot() for _ in range(slots)]

    def run(self, messages: list, polls: int = 3) -> list:
        """Send `messages` (in order), let the learner poll, and return what it reported."""
        send_many(self.inbox, messages)
        for _ in range(polls):
            self.worker.poll(0.01)
        return receive(self.reports, 0.05)


@pytest.fixture
def learner(tmp_path):
    return Neighbours(tmp_path)


def test_ready_message_carries_the_start_counters(learner):
    (ready,) = receive(learner.reports, 0.1)
    assert isinstance(ready, LearnerReady) and ready.policy_version == 0
    assert learner.weights[0].version == 0  # the initial weights are published before anything


def test_trains_a_complete_dataset_publishes_every_sgd_step_and_returns_the_slots(learner):
    dataset = learner.a_dataset()
    receive(learner.reports, 0.1)
    reports = learner.run([Resume(), *dataset])
    (training,) = [r for r in reports if isinstance(r, TrainingReport)]
    sgd_steps = learner.cfg.num_epochs * learner.cfg.num_batches_per_epoch
    assert training.policy_version == sgd_steps
    assert learner.weights[0].version == sgd_steps
    assert training.env_steps == learner.cfg.dataset_size
    assert sorted(receive(learner.free, 0.1)) == [m.slot for m in dataset]


def test_early_epochs_train_the_first_datasets_longer_and_the_gate_follows(tmp_path):
    learner = Neighbours(tmp_path, early_num_epochs=3, early_env_steps=64)
    assert learner.worker.gate.sgd_steps_per_dataset == 3
    receive(learner.reports, 0.1)
    versions = []
    for _ in range(2):
        reports = learner.run([Resume(), *learner.a_dataset()])
        (training,) = [r for r in reports if isinstance(r, TrainingReport)]
        versions.append(training.policy_version)
        assert learner.worker.gate.sgd_steps_per_dataset == 2  # 64 env steps trained on
    assert versions == [3, 3 + 2]


def test_an_incomplete_dataset_waits(learner):
    dataset = learner.a_dataset()
    reports = learner.run([Resume(), *dataset[:-1]])
    assert not any(isinstance(r, TrainingReport) for r in reports)
    assert learner.weights[0].version == 0


def test_paused_learner_stages_but_does_not_train_until_resumed(learner):
    dataset = learner.a_dataset()
    reports = learner.run([Resume(), Pause(), *dataset])
    assert not any(isinstance(r, TrainingReport) for r in reports)
    assert learner.weights[0].version == 0
    reports = learner.run([Resume()])
    assert any(isinstance(r, TrainingReport) for r in reports)


def test_final_checkpoint_after_a_pause_is_the_last_training_state(learner):
    """Trajectories that arrive in the same inbox read as the pause and the checkpoint request
    must not be trained after the checkpoint is written (the final checkpoint would then miss
    the last SGD steps the runner reported)."""
    first, second = learner.a_dataset(), learner.a_dataset()
    learner.run([Resume(), *first])
    version = learner.weights[0].version
    reports = learner.run([*second, Pause(), SaveCheckpoint(final=True, mean_return=None)])
    (saved,) = [r for r in reports if isinstance(r, CheckpointSaved)]
    assert saved.final
    assert checkpoint_info(saved.path)[0] == version == learner.weights[0].version
    assert not any(isinstance(r, TrainingReport) for r in reports)


def test_a_pause_and_a_checkpoint_between_datasets_are_not_a_wait_for_data(tmp_path):
    """Between two `train` calls the learner is paused and saves; that time once counted as
    waiting for data, which pushed the measured lead to its cap (and grew the datasets)."""
    learner = Neighbours(tmp_path, num_epochs=4, num_envs_per_worker=8)
    gate = learner.worker.gate
    gate.clock = clock = FakeClock()
    sgd_step_done = gate.sgd_step_done

    def step_of_10_ms() -> None:  # data is never waited for: it is all there at once
        clock.now += 0.01
        sgd_step_done()

    gate.sgd_step_done = step_of_10_ms
    receive(learner.reports, 0.1)
    learner.run([Resume()])

    def train_a_dataset() -> None:
        learner._next_slot %= learner.buffer.layout.num_slots  # the slots came back
        reports = learner.run(learner.a_dataset())
        assert any(isinstance(r, TrainingReport) for r in reports)

    for _ in range(3):
        train_a_dataset()
    lead = gate.lead
    learner.run([Pause(), SaveCheckpoint(mean_return=0.0, final=False)])
    clock.now += 30.0
    learner.run([Resume()])
    train_a_dataset()
    assert (gate.lead, gate.waited_seconds) == (lead, 0.0)
    clock.now += 30.0  # a real wait for data is still one
    train_a_dataset()
    assert gate.waited_seconds == 30.0 and gate.lead > lead


def test_the_gate_learns_how_many_of_a_slots_rows_are_this_policys(tmp_path):
    learner = Neighbours(tmp_path)
    assert learner.worker.gate.rows_per_slot == learner.buffer.layout.rows_per_slot == 4
    half = [
        TrajectoryReady(policy_id=0, slot=m.slot, rows=(0, 2), worker=0)
        for m in (learner.finished_slot(), learner.finished_slot())
    ]
    learner.run([*half, learner.finished_slot()])
    assert learner.worker.gate.rows_per_slot == (2 + 2 + 4) / 3
    again = Neighbours(tmp_path / "again")  # an exact resume keeps what was learnt
    again.worker.restore_state(learner.worker.snapshot_state())
    assert again.worker.gate.rows_per_slot == (2 + 2 + 4) / 3


def test_a_resumed_run_goes_on_at_the_dataset_size_it_had_grown_to(tmp_path):
    """`--max_batch_size`: datasets grown while the run was lag-bound stay grown after a
    resume, in the checkpoint and in an exact resume (they once regrew from the configured
    size, a window of datasets per doubling)."""
    learner = Neighbours(tmp_path, max_batch_size=256)
    sizer = learner.worker.sizer
    for _ in range(WINDOW):  # a lag-bound window: the datasets double
        sizer.dataset_trained(busy_seconds=1.0, waited_seconds=1.0, lead_at_cap=True)
    grown = sizer.trajectories
    assert grown == 2 * sizer.smallest
    learner.run([SaveCheckpoint(final=False, mean_return=None)])
    resumed = Neighbours(tmp_path, resume=True, max_batch_size=256).worker
    again = Neighbours(tmp_path / "again", max_batch_size=256).worker
    again.restore_state(learner.worker.snapshot_state())
    for worker in (resumed, again):
        assert worker.sizer.trajectories == grown
        assert worker.stager.dataset_trajectories == worker.gate.dataset_trajectories == grown


def test_a_checkpoint_the_disk_cannot_take_is_reported_and_training_goes_on(learner):
    """A full disk at a checkpoint once failed the learner, and with it a run of hours."""

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    learner.worker.store.save = disk_full
    reports = learner.run([SaveCheckpoint(final=False, mean_return=None)])
    (failed,) = [r for r in reports if isinstance(r, CheckpointFailed)]
    assert not failed.final and "No space left on device" in failed.error
    assert str(learner.checkpoint_dir) in failed.error
    reports = learner.run([Resume(), *learner.a_dataset()])
    assert any(isinstance(r, TrainingReport) for r in reports)


def test_a_checkpoint_of_a_non_finite_model_is_refused_and_nothing_is_written(learner):
    """The save the runner asks for, through the worker's own path (docs/reliability.md: no
    checkpoint ever holds a non-finite value)."""
    learner.run([SaveCheckpoint(final=False, mean_return=None)])
    written = {f.name: f.read_bytes() for f in learner.checkpoint_dir.iterdir()}
    assert written  # a finite model is saved
    with torch.no_grad():
        next(learner.worker.learner.model.parameters())[0, 0] = float("nan")
    with pytest.raises(NonFiniteTrainingError, match="refusing to write a checkpoint"):
        learner.run([SaveCheckpoint(final=True, mean_return=None)])
    assert {f.name: f.read_bytes() for f in learner.checkpoint_dir.iterdir()} == written
    assert not [r for r in receive(learner.reports, 0.05) if isinstance(r, CheckpointSaved)]


def test_a_saved_replay_goes_in_the_checkpoints_but_not_in_the_best_one(tmp_path):
    """best.pt is for the weights (enjoy, eval, export): a copy of the replay there would put
    it on disk once more at every new best."""
    learner = Neighbours(tmp_path, algorithm="dqn", batch_size=16, save_replay=True)
    reports = learner.run([SaveCheckpoint(final=False, mean_return=1.0)])
    assert any(isinstance(r, CheckpointSaved) for r in reports)
    store = CheckpointStore(learner.checkpoint_dir)
    checkpoint = store.load(store.list()[-1])
    best = store.load(store.best_path)
    assert STAGER_KEY in checkpoint and STAGER_KEY not in best
    assert set(best) == set(checkpoint) - {STAGER_KEY}
    assert exactly_equal(best["model"], checkpoint["model"])


def test_a_saved_replay_made_with_other_settings_is_left_out_of_a_resume_which_says_so(tmp_path):
    """More envs on a resume (other replay streams) once failed the learner at start with
    a traceback, however often the run was resumed; now it refills the replay and says why."""
    settings = dict(algorithm="dqn", batch_size=16, save_replay=True)
    learner = Neighbours(tmp_path, **settings)
    learner.run([SaveCheckpoint(final=False, mean_return=None)])
    resumed = Neighbours(tmp_path, resume=True, **settings, num_envs_per_worker=8)
    (ready,) = receive(resumed.reports, 0.1)
    assert isinstance(ready, LearnerReady) and ready.resumed_from is not None
    assert ready.note == (
        "the saved replay was made with other settings (num_streams 4 -> 8), so it is not "
        "loaded: the replay refills with 1000 transitions before training resumes"
    )


def test_trajectories_arriving_during_training_are_staged_and_their_slots_freed_at_once(
    learner,
):
    """Staging overlaps SGD: the next dataset's slots, arriving while one trains, are copied
    (into the batcher's back area) and given back before that training ends; a command that
    arrives meanwhile waits for the dataset's end."""
    first, second = learner.a_dataset(), learner.a_dataset()
    receive(learner.reports, 0.1)
    real_train, seen = learner.worker.learner.train, {}

    def train(data, on_sgd_step):
        if seen:  # the second dataset trains as usual
            return real_train(data, on_sgd_step)
        send_many(learner.inbox, [*second, SaveCheckpoint(final=False)])
        stats = real_train(data, on_sgd_step)
        seen["freed"] = sorted(receive(learner.free, 0.1))
        seen["reports"] = receive(learner.reports, 0.05)
        return stats

    learner.worker.learner.train = train
    learner.run([Resume(), *first], polls=1)
    assert seen["freed"] == sorted(m.slot for m in first + second)
    assert not [r for r in seen["reports"] if isinstance(r, CheckpointSaved)]
    assert learner.worker.stager.ready()  # the second dataset, staged during the first
    reports = learner.run([], polls=2)
    assert [r for r in reports if isinstance(r, CheckpointSaved)]
    trained = [r for r in reports if isinstance(r, TrainingReport)]
    assert trained and trained[-1].env_steps == 2 * learner.cfg.dataset_size


def _check(learner, slot: int) -> HandOverCheck:
    return HandOverCheck(0, slot, int(learner.ledger.hand_overs[slot]), returns_slot=True)


def test_a_hand_over_whose_message_was_lost_frees_its_slot_and_sampling_goes_on(learner):
    """The worker died between the ledger's hand-over and its message: the supervisor's check
    finds no message for the slot, so the learner lets it go (it was on its way for ever)."""
    receive(learner.reports, 0.1)
    lost = learner.finished_slot()  # handed over in the ledger; the message never sent
    assert learner.ledger.slots_in_flight(0) == 1
    learner.run([Resume(), _check(learner, lost.slot)])
    assert receive(learner.free, 0.1) == [lost.slot]
    assert learner.ledger.slots_in_flight(0) == 0
    assert learner.worker.stager.filled == 0  # nothing staged from it


def test_a_check_behind_its_message_stages_the_slot_once(learner):
    receive(learner.reports, 0.1)
    (*rest, last) = learner.a_dataset()
    reports = learner.run([Resume(), *rest, last, _check(learner, last.slot)])
    assert [r for r in reports if isinstance(r, TrainingReport)]  # the dataset was whole
    assert sorted(receive(learner.free, 0.1)) == sorted(m.slot for m in (*rest, last))


def test_a_check_of_an_earlier_hand_over_of_the_slot_is_ignored(learner):
    receive(learner.reports, 0.1)
    slot = learner.finished_slot().slot
    stale = _check(learner, slot)._replace(hand_over=int(learner.ledger.hand_overs[slot]) - 1)
    learner.run([Resume(), stale])
    assert receive(learner.free, 0.1) == []
    assert learner.ledger.slots_in_flight(0) == 1  # still this hand-over's, still awaited


@pytest.mark.parametrize(
    "settings, tuned",
    [
        ({"learner_torch_threads": 2, "learner_threads_adaptive": True}, True),
        ({"learner_torch_threads": 2, "learner_threads_adaptive": False}, False),
        ({"learner_torch_threads": 1, "learner_threads_adaptive": True}, False),
        # the inline components share the caller's thread count
        (
            {"learner_torch_threads": 2, "learner_threads_adaptive": True, "serial_mode": True},
            False,
        ),
    ],
)
def test_an_adaptive_learner_with_threads_to_choose_from_tells_its_tuner_what_it_trained(
    tmp_path, settings, tuned
):
    learner = Neighbours(tmp_path, **settings)
    tuner = learner.worker.tuner
    assert (tuner is not None) == tuned
    if not tuned:
        return
    seen, interruptions = [], []
    tuner.trained, tuner.interrupted = seen.append, lambda: interruptions.append(True)
    receive(learner.reports, 0.1)
    reports = learner.run([Resume(), *learner.a_dataset()])
    (training,) = [r for r in reports if isinstance(r, TrainingReport)]
    assert seen == [1] * (learner.cfg.num_epochs * learner.cfg.num_batches_per_epoch)
    assert training.stats["perf/learner_threads"] == 2.0
    learner.run([SaveCheckpoint(final=False, mean_return=None)])
    assert interruptions == [True]  # a checkpoint's time is not training
    learner.run([Pause()])
    assert interruptions == [True, True]
