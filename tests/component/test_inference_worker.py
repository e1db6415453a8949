"""An inference worker alone, with its neighbours played by the test.

The test fills observations and recurrent states into slots of a real shared trajectory
buffer as rollout workers would, publishes weights as the learner would, rings the worker's
request queue (a `DoorbellQueue`, as in the real wiring) with `InferenceRequested` messages,
lets it poll in-process, and reads what comes back: the actions, log-probs, values, policy
versions and next recurrent states written in place, the `ActionsReady` answers in each rollout
worker's inbox of the right generation, and the `InferenceReport`s to the runner.

Most tests use a scripted policy whose outputs are a known function of its input row and of
its one weight, so that each written value tells which row it was computed from and with
which published weights; one test runs the real actor-critic.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer, TrajectoryLayout
from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.messages import (
    ActionsReady,
    InferenceReport,
    InferenceRequested,
    Pause,
    Resume,
    SaveCheckpoint,
    Stop,
)
from sampleforge.comms.queues import make_queue, receive, send_many
from sampleforge.components import inference_worker as inference_module
from sampleforge.components.inference_worker import InferenceEndpoints, InferenceWorker
from sampleforge.components.wiring import trajectory_layout
from sampleforge.config import make_config
from sampleforge.envs.registry import env_info
from sampleforge.models.actor_critic import ActOutput
from sampleforge.models.factory import make_actor_critic
from sampleforge.spaces import TensorSpec

ROWS, ROLLOUT, SLOTS, RNN = 3, 4, 4, 2
WORKERS, GENERATIONS = 2, 2
OFFSET_PER_VERSION = 1000  # the scripted policy's weight, per published version


class ScriptedPolicy(nn.Module):
    """Deterministic stand-in for the actor-critic, with a single weight `offset`.

    For an input row with observation (a, b) and recurrent state h:
    action = a + offset, log-prob = -(b + offset), value = 10 a + offset, next state = h + 1 +
    offset. Observations encode (slot, step, row), so each output names the row it came from.
    """

    rnn_state_size = RNN
    explores_per_env = True  # inference hands it each row's env index

    def __init__(self):
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(()))
        self.batch_sizes: list[int] = []  # one entry per forward pass
        self.during_forward = None  # a test's callback: what happens while the batch runs
        self.env_ids: list[torch.Tensor] = []  # one entry per forward pass

    def act(self, obs, rnn_states, deterministic=False, env_ids=None):
        self.batch_sizes.append(len(rnn_states))
        self.env_ids.append(env_ids)
        if self.during_forward is not None:
            self.during_forward()
        x = obs["obs"]
        return ActOutput(
            actions=(x[:, :1] + self.offset).long(),
            log_probs=-(x[:, 1] + self.offset),
            values=10 * x[:, 0] + self.offset,
            new_rnn_states=rnn_states + 1 + self.offset,
        )


def _code(slot: int, step: int, row: int) -> float:
    return 100.0 * slot + 10.0 * step + row


class Neighbours:
    """The queues and buffers around one inference worker, and helpers to play its neighbours."""

    def __init__(
        self,
        *,
        policy_id: int = 0,
        sole_policy: bool = True,
        publish_version: int | None = 0,
        splits_per_worker: int = 1,
    ):
        layout = TrajectoryLayout(
            obs_specs={"obs": TensorSpec((2,), torch.float32)},
            action_spec=TensorSpec((1,), torch.int64),
            rnn_state_size=RNN,
            rollout=ROLLOUT,
            rows_per_slot=ROWS,
            num_slots=SLOTS,
        )
        self.buffer = SharedTrajectoryBuffer(layout)
        self.ledger = SamplerLedger(WORKERS, SLOTS)
        self.learner_model = ScriptedPolicy()
        self.weights = SharedPolicyWeights(model_numel(self.learner_model))
        self.requests = DoorbellQueue(64 << 10)
        self.control, self.reports = make_queue(64 << 10), make_queue(64 << 10)
        self.inboxes = [[make_queue(64 << 10) for _ in range(GENERATIONS)] for _ in range(WORKERS)]
        endpoints = InferenceEndpoints(
            buffer=self.buffer,
            weights=self.weights,
            ledger=self.ledger,
            request_queue=self.requests,
            control_queue=self.control,
            rollout_inboxes=self.inboxes,
            report_queue=self.reports,
        )
        self.worker = InferenceWorker(
            policy_id=policy_id,
            index=0,
            endpoints=endpoints,
            model_factory=ScriptedPolicy,
            device=torch.device("cpu"),
            seed=0,
            sole_policy=sole_policy,
            splits_per_worker=splits_per_worker,
        )
        self.rng = np.random.default_rng(0)
        if publish_version is not None:
            self.publish(publish_version)

    def publish(self, version: int) -> None:
        """Play the learner: publish weights whose outputs differ for each version."""
        with torch.no_grad():
            self.learner_model.offset.fill_(OFFSET_PER_VERSION * version)
        self.weights.publish(self.learner_model, version)

    def fill(self, slot: int, step: int, policy_ids=(0,) * ROWS) -> torch.Tensor:
        """Play a rollout worker: observations of `step` (and its recurrent states, unless
        inference wrote them as the previous step's next state); returns the states."""
        b = self.buffer
        for row in range(ROWS):
            b.obs["obs"][slot, step, row] = torch.tensor([_code(slot, step, row), -row])
        if torch.isnan(b.rnn_states[slot, step]).all():  # else inference wrote it at step - 1
            b.rnn_states[slot, step] = torch.from_numpy(
                self.rng.normal(size=(ROWS, RNN)).astype(np.float32)
            )
        b.policy_ids[slot, step] = torch.tensor(policy_ids, dtype=torch.int32)
        return b.rnn_states[slot, step].clone()

    def request(self, *requests: InferenceRequested) -> None:
        send_many(self.requests, list(requests))

    def answers(self, worker: int, generation: int = 0) -> list:
        return receive(self.inboxes[worker][generation], 0.0)

    def assert_served(
        self, slot: int, step: int, states: torch.Tensor, version: int, rows=range(ROWS)
    ) -> None:
        """The rows of (slot, step) hold the scripted outputs for `version`'s weights."""
        b, offset = self.buffer, OFFSET_PER_VERSION * version
        for row in rows:
            code = _code(slot, step, row)
            assert b.actions[slot, step, row, 0] == code + offset
            assert b.log_probs[slot, step, row] == row - offset
            assert b.values[slot, step, row] == 10 * code + offset
            assert b.policy_versions[slot, step, row] == version
            torch.testing.assert_close(b.rnn_states[slot, step + 1, row], states[row] + 1 + offset)

    def assert_untouched(
        self, slot: int, step: int, rows=range(ROWS), next_state: bool = True
    ) -> None:
        """Nothing was written for (slot, step): the buffer's poison is still there (in the
        next step's recurrent state too, unless `next_state` is False: the test wrote it)."""
        b = self.buffer
        for row in rows:
            assert b.actions[slot, step, row, 0] == -1
            assert torch.isnan(b.log_probs[slot, step, row])
            assert torch.isnan(b.values[slot, step, row])
            assert b.policy_versions[slot, step, row] == -1
            if next_state:
                assert torch.isnan(b.rnn_states[slot, step + 1, row]).all()


@pytest.fixture
def inference():
    return Neighbours()


def test_writes_every_output_into_the_requested_rows_and_step_only(inference):
    states = inference.fill(slot=2, step=1)
    inference.fill(slot=1, step=1)  # observations of another slot are there, not requested
    inference.request(InferenceRequested(worker=1, split=0, slot=2, step=1, generation=0))
    inference.worker.poll(0.1)
    inference.assert_served(2, 1, states, version=0)
    inference.assert_untouched(2, 0, next_state=False)  # its next state is step 1's input
    for step in (2, 3):
        inference.assert_untouched(2, step)
    for slot in (0, 1, 3):
        for step in range(ROLLOUT):
            inference.assert_untouched(slot, step, next_state=(slot, step) != (1, 0))
    assert inference.answers(1) == [ActionsReady(split=0, step=1, policy_id=0)]
    assert not inference.answers(0) and not inference.answers(1, generation=1)


@pytest.mark.parametrize("sole_policy", [True, False])
def test_each_row_is_acted_for_with_its_env_index_across_the_sampler(sole_policy):
    """A policy that explores per env (Ape-X's epsilon ladder) is told which env each row is:
    (worker x splits_per_worker + split) x rows_per_slot + row, whoever plays the other rows."""
    inference = Neighbours(sole_policy=sole_policy, splits_per_worker=2)
    mixed = (0, 1, 0)  # policy 1 plays row 1: not this worker's
    inference.fill(slot=2, step=1, policy_ids=(0,) * ROWS if sole_policy else mixed)
    inference.fill(slot=0, step=3)
    inference.request(
        InferenceRequested(worker=1, split=1, slot=2, step=1, generation=0),
        InferenceRequested(worker=0, split=0, slot=0, step=3, generation=0),
    )
    inference.worker.poll(0.1)
    (env_ids,) = inference.worker.model.env_ids
    first = (1 * 2 + 1) * ROWS  # worker 1, split 1
    rows = [0, 1, 2] if sole_policy else [0, 2]
    assert env_ids.tolist() == [first + r for r in rows] + [0, 1, 2]


def test_a_policy_that_does_not_explore_per_env_gets_no_env_indices(inference):
    """Computing them is skipped on the hot path of policies that do not use them (APPO)."""
    inference.worker.model.explores_per_env = False
    inference.fill(slot=2, step=1)
    inference.request(InferenceRequested(worker=1, split=0, slot=2, step=1, generation=0))
    inference.worker.poll(0.1)
    assert inference.worker.model.env_ids == [None]


def test_requests_of_several_workers_are_served_in_one_forward_pass(inference):
    requests = [
        InferenceRequested(worker=0, split=0, slot=0, step=0, generation=0),
        InferenceRequested(worker=1, split=1, slot=1, step=3, generation=0),
        InferenceRequested(worker=0, split=1, slot=3, step=2, generation=0),
    ]
    states = [inference.fill(r.slot, r.step) for r in requests]
    inference.request(*requests)
    inference.worker.poll(0.1)
    assert inference.worker.model.batch_sizes == [len(requests) * ROWS]
    for r, s in zip(requests, states):
        inference.assert_served(r.slot, r.step, s, version=0)
    # Each worker gets the answers to its own requests, in order.
    assert inference.answers(0) == [ActionsReady(0, 0, 0), ActionsReady(1, 2, 0)]
    assert inference.answers(1) == [ActionsReady(1, 3, 0)]


def test_newly_published_weights_are_used_from_the_next_batch_on(inference):
    first = inference.fill(slot=0, step=0)
    inference.request(InferenceRequested(0, 0, 0, 0, 0))
    inference.worker.poll(0.1)
    inference.assert_served(0, 0, first, version=0)

    inference.publish(3)  # the learner took 3 SGD steps meanwhile
    second = inference.fill(slot=0, step=1)
    inference.request(InferenceRequested(0, 0, 0, 1, 0))
    inference.worker.poll(0.1)
    inference.assert_served(0, 1, second, version=3)  # new weights, new version recorded
    inference.assert_served(0, 0, first, version=0)  # earlier step not rewritten
    assert inference.worker.version == 3


def test_the_first_batch_waits_for_the_learners_first_weights():
    inference = Neighbours(publish_version=None)
    states = inference.fill(slot=1, step=0)
    inference.request(InferenceRequested(0, 0, 1, 0, 0))
    timer = threading.Timer(0.3, inference.publish, args=(2,))
    timer.start()
    try:
        start = time.monotonic()
        inference.worker.poll(0.1)
        assert time.monotonic() - start >= 0.25  # it waited rather than act with no weights
    finally:
        timer.cancel()
    inference.assert_served(1, 0, states, version=2)


def test_requests_of_a_retired_generation_are_dropped_not_written(inference):
    """Issue 14.8: a request whose generation is no longer its worker's current one is
    neither written nor answered (here: already retired when the batch is formed)."""
    stale = [
        InferenceRequested(worker=1, split=0, slot=1, step=0, generation=0),
        InferenceRequested(worker=1, split=1, slot=2, step=0, generation=0),
    ]
    live = InferenceRequested(worker=0, split=0, slot=0, step=0, generation=0)
    for r in (*stale, live):
        inference.fill(r.slot, r.step)
    live_states = inference.buffer.rnn_states[0, 0].clone()
    inference.request(*stale, live)
    assert inference.ledger.retire(1) == 1  # the supervisor replaces worker 1 meanwhile
    inference.worker.poll(0.1)
    for r in stale:
        inference.assert_untouched(r.slot, r.step)
    assert not inference.answers(1, generation=0) and not inference.answers(1, generation=1)
    inference.assert_served(0, 0, live_states, version=0)
    assert inference.answers(0) == [ActionsReady(0, 0, 0)]
    assert inference.worker.model.batch_sizes == [ROWS]  # the live request only

    # The replacement's requests are served, and answered in its own (fresh) inbox.
    states = inference.fill(slot=1, step=0)
    inference.request(InferenceRequested(worker=1, split=0, slot=1, step=0, generation=1))
    inference.worker.poll(0.1)
    inference.assert_served(1, 0, states, version=0)
    assert inference.answers(1, generation=1) == [ActionsReady(0, 0, 0)]
    assert not inference.answers(1, generation=0)


def test_a_worker_retired_while_the_batch_runs_gets_nothing_written(inference):
    """Issue 14.8, the other half: the generation is checked again just before the writes, so
    a worker the supervisor retires during the forward pass (its slots may be reclaimed and
    given to another worker) gets nothing written; the rest of the batch is served."""
    stale = InferenceRequested(worker=1, split=0, slot=1, step=2, generation=0)
    live = InferenceRequested(worker=0, split=1, slot=3, step=0, generation=0)
    live_states = [inference.fill(r.slot, r.step) for r in (stale, live)][1]
    inference.request(stale, live)
    inference.worker.model.during_forward = lambda: inference.ledger.retire(1)
    inference.worker.poll(0.1)
    assert inference.worker.model.batch_sizes == [2 * ROWS]  # both were in the forward pass
    inference.assert_untouched(stale.slot, stale.step)
    inference.assert_served(live.slot, live.step, live_states, version=0)
    assert not inference.answers(1, generation=0) and not inference.answers(1, generation=1)
    assert inference.answers(0) == [ActionsReady(split=1, step=0, policy_id=0)]


def test_a_batch_that_goes_entirely_stale_while_it_runs_writes_nothing(inference):
    stale = InferenceRequested(worker=1, split=0, slot=1, step=2, generation=0)
    inference.fill(stale.slot, stale.step)
    inference.request(stale)
    inference.worker.model.during_forward = lambda: inference.ledger.retire(1)
    inference.worker.poll(0.1)
    inference.assert_untouched(stale.slot, stale.step)
    assert not inference.answers(1, generation=0) and not inference.answers(1, generation=1)


def test_a_batch_of_only_stale_requests_runs_no_forward_pass(inference):
    inference.fill(slot=3, step=2)
    inference.request(InferenceRequested(worker=0, split=0, slot=3, step=2, generation=0))
    inference.ledger.retire(0)
    inference.worker.poll(0.1)
    assert inference.worker.model.batch_sizes == []
    inference.assert_untouched(3, 2)
    assert not inference.answers(0) and not inference.answers(0, generation=1)


def test_with_several_policies_it_acts_only_for_its_policys_rows():
    inference = Neighbours(policy_id=1, sole_policy=False)
    states = inference.fill(slot=0, step=2, policy_ids=(0, 1, 1))
    inference.request(InferenceRequested(0, 1, 0, 2, 0))
    inference.worker.poll(0.1)
    assert inference.worker.model.batch_sizes == [2]
    inference.assert_served(0, 2, states, version=0, rows=(1, 2))
    inference.assert_untouched(0, 2, rows=(0,))  # policy 0's row: its own worker's job
    assert inference.answers(0) == [ActionsReady(split=1, step=2, policy_id=1)]


def test_the_sole_policy_acts_for_every_row_without_reading_policy_ids(inference):
    states = inference.fill(slot=1, step=1)
    inference.buffer.policy_ids[1, 1] = -1  # not read when the run has one policy
    inference.request(InferenceRequested(0, 0, 1, 1, 0))
    inference.worker.poll(0.1)
    inference.assert_served(1, 1, states, version=0)


def test_a_request_wakes_a_waiting_worker_through_the_doorbell(inference):
    states = inference.fill(slot=0, step=0)
    timer = threading.Timer(0.2, inference.request, args=(InferenceRequested(0, 0, 0, 0, 0),))
    timer.start()
    try:
        start = time.monotonic()
        inference.worker.poll(10.0)
        elapsed = time.monotonic() - start
    finally:
        timer.cancel()
    assert 0.15 <= elapsed < 5.0  # woken by the request, not by the timeout
    inference.assert_served(0, 0, states, version=0)


def test_reports_batches_and_samples_since_the_last_report_and_nothing_while_idle(
    inference, monkeypatch
):
    monkeypatch.setattr(inference_module, "REPORT_EVERY_SEC", 0.0)
    for slot in (0, 1):
        inference.fill(slot, 0)
    inference.request(InferenceRequested(0, 0, 0, 0, 0), InferenceRequested(1, 0, 1, 0, 0))
    inference.worker.poll(0.1)
    (report,) = receive(inference.reports, 0.1)
    assert isinstance(report, InferenceReport)
    assert report.component == "inference_worker_p0_0" == inference.worker.name
    assert (report.batches, report.samples) == (1, 2 * ROWS)
    assert set(report.timings) == {"forward", "weights"}
    assert report.timings["forward"] > 0
    for _ in range(5):  # idle (between `train` calls nobody reads reports): nothing sent
        inference.worker.poll(0.0)
    assert receive(inference.reports, 0.1) == []
    inference.fill(2, 0)
    inference.request(InferenceRequested(0, 0, 2, 0, 0))
    inference.worker.poll(0.1)
    (report,) = receive(inference.reports, 0.1)
    assert (report.batches, report.samples) == (1, ROWS)  # the counters started again


def test_no_report_before_the_reporting_period(inference):
    inference.fill(0, 0)
    inference.request(InferenceRequested(0, 0, 0, 0, 0))
    inference.worker.poll(0.1)
    assert not receive(inference.reports, 0.0)  # REPORT_EVERY_SEC (1 s) has not passed


def test_control_messages(inference):
    send_many(inference.control, [Pause(), Resume()])
    inference.worker.poll(0.0)
    assert inference.worker.running
    send_many(inference.control, [Stop()])
    inference.worker.poll(0.0)
    assert not inference.worker.running
    send_many(inference.control, [SaveCheckpoint()])
    with pytest.raises(TypeError, match="unexpected message"):
        inference.worker.poll(0.0)


def test_real_actor_critic_acts_with_the_published_weights():
    """The real model, recurrent: values and next states are those of the learner's model
    (not of the worker's own random initialisation), actions are valid."""
    cfg = make_config(
        env="CartPole-v1",
        num_workers=1,
        num_envs_per_worker=4,
        worker_num_splits=1,
        rollout=8,
        batch_size=64,
        rnn="gru",
        rnn_size=8,
        device="cpu",
        seed=0,
    )
    info = env_info("CartPole-v1")
    obs_space, act_space = info.observation_space, info.action_space
    torch.manual_seed(1)
    learner_model = make_actor_critic(cfg, obs_space, act_space)
    buffer = SharedTrajectoryBuffer(trajectory_layout(cfg, info, learner_model.rnn_state_size))
    weights = SharedPolicyWeights(model_numel(learner_model))
    weights.publish(learner_model, version=4)
    inboxes = [[make_queue(64 << 10)]]
    endpoints = InferenceEndpoints(
        buffer=buffer,
        weights=weights,
        ledger=SamplerLedger(1, buffer.layout.num_slots),
        request_queue=DoorbellQueue(64 << 10),
        control_queue=make_queue(64 << 10),
        rollout_inboxes=inboxes,
        report_queue=make_queue(64 << 10),
    )
    worker = InferenceWorker(
        policy_id=0,
        index=0,
        endpoints=endpoints,
        device=torch.device("cpu"),
        seed=0,
        model_factory=lambda: make_actor_critic(cfg, obs_space, act_space),
        sole_policy=True,
    )
    rows = buffer.layout.rows_per_slot
    obs = torch.randn(rows, 4)
    states = torch.randn(rows, learner_model.rnn_state_size)
    buffer.obs["obs"][1, 3], buffer.rnn_states[1, 3] = obs, states
    send_many(endpoints.request_queue, [InferenceRequested(0, 0, 1, 3, 0)])
    worker.poll(0.1)
    expected = learner_model.act({"obs": obs}, states)
    assert set(buffer.actions[1, 3, :, 0].tolist()) <= {0, 1}
    assert torch.all(buffer.log_probs[1, 3] <= 0)
    torch.testing.assert_close(buffer.values[1, 3], expected.values.detach())
    torch.testing.assert_close(buffer.rnn_states[1, 4], expected.new_rnn_states.detach())
    assert torch.all(buffer.policy_versions[1, 3] == 4)
    assert receive(inboxes[0][0], 0.0) == [ActionsReady(0, 3, 0)]
