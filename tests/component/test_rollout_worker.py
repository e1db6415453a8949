"""A rollout worker alone, with a scripted stand-in for the inference worker.

Checks the shared-buffer protocol from the worker's side: observations of step t+1 follow the
action of step t, rewards and dones land at step t, recurrent state is zeroed after an episode
ends, step T is carried over to the next slot, finished slots reach the learner queue, and
episode statistics reach the runner.
"""

import time

import gymnasium as gym
import numpy as np
import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer, TrajectoryLayout
from sampleforge.comms.messages import (
    ActionsReady,
    EpisodesFinished,
    InferenceRequested,
    Pause,
    Paused,
    ResendRequests,
    Resume,
    SamplerReport,
    TrajectoryReady,
)
from sampleforge.comms.queues import make_queue, receive, send_many
from sampleforge.components import rollout_worker
from sampleforge.components.rollout_worker import RolloutEndpoints, RolloutWorker
from sampleforge.envs.policy_mapping import PolicyMapping
from sampleforge.envs.registry import EnvContext, EnvSpec
from sampleforge.spaces import action_spec, observation_specs

EPISODE_LENGTHS = (3, 5)  # per env index: episodes end at different times


class CountingEnv(gym.Env):
    """obs = [steps into the episode, last action]; reward = the action; fixed episode length."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, length: int):
        self.length = length
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0, -1], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, action], np.float32)
        return obs, float(action), self.t >= self.length, False, {}


def make_counting_env(context: EnvContext) -> gym.Env:
    return CountingEnv(EPISODE_LENGTHS[context.env_index % 2])


def _setup(rollout=4, rnn_size=3, num_slots=6):
    env = CountingEnv(3)
    layout = TrajectoryLayout(
        obs_specs=observation_specs(env.observation_space),
        action_spec=action_spec(env.action_space),
        rnn_state_size=rnn_size,
        rollout=rollout,
        rows_per_slot=2,
        num_slots=num_slots,
    )
    buffer = SharedTrajectoryBuffer(layout)
    queues = {name: make_queue() for name in ("inbox", "inference", "learner", "free", "report")}
    send_many(queues["free"], list(range(num_slots)))
    ledger = SamplerLedger(1, num_slots)
    endpoints = RolloutEndpoints(
        buffer=buffer,
        inbox=queues["inbox"],
        inference_queues={0: queues["inference"]},
        learner_queues={0: queues["learner"]},
        slots=SlotPool.create(ledger, queues["free"]),
        ledger=ledger,
        report_queue=queues["report"],
    )
    worker = RolloutWorker(
        worker_index=0,
        endpoints=endpoints,
        env_spec=EnvSpec("counting", make_counting_env),
        num_envs=4,
        num_splits=2,
        seed=0,
    )
    return worker, buffer, queues


def _answer_requests(buffer, queues, rng) -> list[InferenceRequested]:
    """Play the inference worker: random actions, h_{t+1} = h_t + 1."""
    requests = receive(queues["inference"], 0.05)
    for r in requests:
        buffer.actions[r.slot, r.step] = torch.from_numpy(rng.integers(0, 4, (2, 1)))
        buffer.policy_versions[r.slot, r.step] = 7
        buffer.rnn_states[r.slot, r.step + 1] = buffer.rnn_states[r.slot, r.step] + 1
    send_many(queues["inbox"], [ActionsReady(r.split, r.step) for r in requests])
    return requests


def test_rollout_worker_fills_slots_by_the_protocol():
    worker, buffer, queues = _setup()
    rng = np.random.default_rng(0)
    send_many(queues["inbox"], [Resume()])
    finished: list[TrajectoryReady] = []
    for _ in range(40):
        worker.poll(0.1)
        _answer_requests(buffer, queues, rng)
        finished += [m for m in receive(queues["learner"], 0.0)]
    worker._maybe_report(force=True)
    assert len(finished) >= 4  # both splits completed several rollouts
    T = buffer.rollout
    for msg in finished:
        s = msg.slot
        obs, actions = buffer.obs["obs"][s], buffer.actions[s]
        for t in range(T):
            for row in range(buffer.layout.rows_per_slot):
                done = buffer.dones[s, t, row] > 0
                # The action taken at t is in the observation of t+1 and is the reward.
                assert buffer.rewards[s, t, row] == actions[t, row, 0]
                if not done:
                    assert obs[t + 1, row, 1] == actions[t, row, 0]
                    assert obs[t + 1, row, 0] == obs[t, row, 0] + 1
                    assert torch.all(
                        buffer.rnn_states[s, t + 1, row] == buffer.rnn_states[s, t, row] + 1
                    )
                else:  # a new episode: first observation, fresh recurrent state
                    assert obs[t + 1, row, 0] == 0
                    assert torch.all(buffer.rnn_states[s, t + 1, row] == 0)
    # Episodes of different lengths ended inside rollouts.
    dones = torch.stack([buffer.dones[m.slot, :T] for m in finished])
    assert dones.sum() > 0
    reports = [m for m in receive(queues["report"], 0.5) if isinstance(m, EpisodesFinished)]
    lengths = {length for r in reports for length in r.lengths}
    assert lengths == set(EPISODE_LENGTHS)


def test_pause_is_confirmed_after_the_statistics_of_every_step_before_it(monkeypatch):
    # The runner ends a train call once every worker confirmed the pause: by then the episodes
    # of the call must be on the report queue, ahead of the confirmation.
    worker, buffer, queues = _setup()
    rng = np.random.default_rng(3)
    send_many(queues["inbox"], [Resume()])
    for _ in range(20):
        worker.poll(0.1)
        _answer_requests(buffer, queues, rng)
    receive(queues["report"], 0.0)  # what the worker reported on its own schedule
    for _ in range(3):  # steps no periodic report has counted yet
        worker.poll(0.1)
        _answer_requests(buffer, queues, rng)
    send_many(queues["inbox"], [Pause()])
    worker.poll(0.1)
    reports = receive(queues["report"], 0.5)
    assert isinstance(reports[-1], Paused) and reports[-1].worker == 0
    frames = sum(r.env_frames for r in reports if isinstance(r, SamplerReport))
    assert frames > 0, "the steps since the last report were not flushed before the pause"
    # Paused: answers wait, nothing is stepped until Resume, and nothing is reported. Between
    # `train` calls nobody reads the report queue: a report a second from every paused worker
    # once filled it in a long pause, and a full queue fails the worker.
    monkeypatch.setattr(rollout_worker, "REPORT_EVERY_SEC", 0.0)  # every poll is due
    _answer_requests(buffer, queues, rng)
    for _ in range(20):
        worker.poll(0.0)
    assert receive(queues["report"], 0.1) == []


def _endpoints_of(worker: RolloutWorker, **changes) -> RolloutEndpoints:
    """The queues and buffers of `worker`, for another worker in its place."""
    ends = {
        "buffer": worker.buffer,
        "inbox": worker.inbox,
        "inference_queues": worker.inference_queues,
        "learner_queues": worker.learner_queues,
        "slots": worker.slots,
        "ledger": worker.ledger,
        "report_queue": worker.report_queue,
    }
    return RolloutEndpoints(**{**ends, **changes})


class ResetClockEnv(CountingEnv):
    """A CountingEnv that notes when each of its resets ended (wall time)."""

    resets_ended: list[float] = []

    def reset(self, *, seed=None, options=None):
        time.sleep(0.01)
        out = super().reset(seed=seed, options=options)
        ResetClockEnv.resets_ended.append(time.time())
        return out


def test_the_first_resets_count_as_signs_of_life():
    # Every env's first reset runs inside one poll; with hundreds of envs that outlasts the
    # supervisor's hang timeout, so the worker beats after each split's resets.
    worker, buffer, queues = _setup()
    worker.close()
    ResetClockEnv.resets_ended = []
    worker = RolloutWorker(
        worker_index=0,
        endpoints=_endpoints_of(worker),
        env_spec=EnvSpec("reset_clock", lambda context: ResetClockEnv(3)),
        num_envs=4,
        num_splits=2,
        seed=0,
    )
    worker.poll(0.0)
    assert len(ResetClockEnv.resets_ended) == 4
    assert float(worker.ledger.heartbeats[0]) >= max(ResetClockEnv.resets_ended)
    worker.close()


def _two_policy_split_worker():
    """A worker whose one split has a row of each of two policies (seats drawn at random)."""
    worker, buffer, queues = _setup()
    worker.close()
    queues["inference_1"] = make_queue()
    endpoints = _endpoints_of(
        worker,
        inference_queues={0: queues["inference"], 1: queues["inference_1"]},
        learner_queues={0: queues["learner"], 1: make_queue()},
    )
    for seed in range(100):
        worker = RolloutWorker(
            worker_index=0,
            endpoints=endpoints,
            env_spec=EnvSpec("counting", make_counting_env),
            num_envs=2,
            num_splits=1,
            seed=seed,
            policy_mapping=PolicyMapping("random", 2),
        )
        if set(worker.splits[0].row_policy.tolist()) == {0, 1}:
            return worker, queues
        worker.close()
    raise AssertionError("no seed in 100 gave a split of both policies")


def test_requests_are_sent_again_to_the_policies_whose_answers_did_not_come_while_paused():
    # One policy answered after a Pause (the answer waits for Resume); the other's inference
    # worker died with the request. That one is asked again: the split once waited for ever.
    worker, queues = _two_policy_split_worker()
    send_many(queues["inbox"], [Resume()])
    worker.poll(0.05)
    assert len(receive(queues["inference"], 0.1)) == len(receive(queues["inference_1"], 0.1)) == 1
    send_many(queues["inbox"], [ActionsReady(0, 0, 0), ActionsReady(0, 0, 1)])
    worker.poll(0.05)  # step 0 played; step 1 asked of both policies
    assert [r.step for r in receive(queues["inference_1"], 0.1)] == [1]
    receive(queues["inference"], 0.1)
    send_many(queues["inbox"], [Pause(), ActionsReady(0, 1, 0), ResendRequests()])
    worker.poll(0.05)
    assert [r.step for r in receive(queues["inference_1"], 0.1)] == [1]
    assert receive(queues["inference"], 0.1) == []  # policy 0's answer is in hand
    send_many(queues["inbox"], [Resume(), ActionsReady(0, 1, 1)])
    worker.poll(0.05)
    assert worker.splits[0].step == 2
    worker.close()


def test_step_T_is_carried_to_the_next_slot():
    worker, buffer, queues = _setup(rollout=4)
    rng = np.random.default_rng(1)
    send_many(queues["inbox"], [Resume()])
    requests_by_split: dict[int, list[InferenceRequested]] = {0: [], 1: []}
    for _ in range(12):
        worker.poll(0.1)
        for r in _answer_requests(buffer, queues, rng):
            requests_by_split[r.split].append(r)
    for requests in requests_by_split.values():
        first_of_next = [r for r in requests if r.step == 0][1:]
        last_steps = [r for r in requests if r.step == buffer.rollout - 1]
        assert first_of_next, "no second rollout started"
        for prev, nxt in zip(last_steps, first_of_next):
            assert prev.slot != nxt.slot
            assert torch.equal(buffer.obs["obs"][prev.slot, -1], buffer.obs["obs"][nxt.slot, 0])
            assert torch.equal(buffer.rnn_states[prev.slot, -1], buffer.rnn_states[nxt.slot, 0])


def test_worker_waits_for_a_free_slot_instead_of_overwriting():
    # 2 slots only: both splits hold one; finished rollouts cannot start new ones until the
    # learner gives a slot back.
    worker, buffer, queues = _setup(rollout=2, num_slots=2)
    rng = np.random.default_rng(2)
    send_many(queues["inbox"], [Resume()])
    for _ in range(10):
        worker.poll(0.05)
        _answer_requests(buffer, queues, rng)
    finished = receive(queues["learner"], 0.0)
    assert len(finished) == 2  # one per split, then both park
    assert all(s.slot == -1 for s in worker.splits)
    # the learner copies one (the ledger's count of slots on their way drops) and releases it
    worker.ledger.reader_done(finished[0].slot, 0)
    send_many(queues["free"], [finished[0].slot])
    worker.poll(0.05)
    assert sum(s.slot >= 0 for s in worker.splits) == 1


def test_worker_starts_no_rollout_while_the_learner_wants_no_more_slots():
    worker, buffer, queues = _setup(rollout=2, num_slots=6)
    worker.ledger.set_sampling_slots(0, 0)  # back-pressure: the learner is busy
    rng = np.random.default_rng(3)
    send_many(queues["inbox"], [Resume()])
    for _ in range(5):
        worker.poll(0.05)
        assert not _answer_requests(buffer, queues, rng)
    assert all(s.slot == -1 for s in worker.splits)
    worker.ledger.set_sampling_slots(0, 1)  # it wants one more: exactly one split starts
    for _ in range(3):
        worker.poll(0.05)
    assert sum(s.slot >= 0 for s in worker.splits) == 1


def test_splits_take_turns_when_only_one_slot_may_be_on_its_way():
    # A value-based learner's replay ratio lets one slot or two be on their way. The split that
    # finishes a rollout must not take the next slot from a sibling already waiting for one:
    # that sibling's envs would stand still for the rest of the run.
    worker, buffer, queues = _setup(rollout=2, num_slots=6)
    worker.ledger.set_sampling_slots(0, 1)
    rng = np.random.default_rng(4)
    send_many(queues["inbox"], [Resume()])
    rollouts = {0: 0, 1: 0}
    for _ in range(60):
        worker.poll(0.02)
        _answer_requests(buffer, queues, rng)
        for msg in receive(queues["learner"], 0.0):  # the learner copies each slot at once
            rollouts[msg.split] += 1
            worker.ledger.reader_done(msg.slot, 0)
            send_many(queues["free"], [msg.slot])
    assert rollouts[0] + rollouts[1] >= 10
    assert abs(rollouts[0] - rollouts[1]) <= 1, rollouts
