"""Unit tests for the ReplayStager: finished slots -> a policy's replay (learners/replay_stager.py).

The slots of one env (the same worker, split and row) from one rollout to the next are one
stream of the replay; the second continues the first. Other policies' steps go in unsampleable,
rewards are scaled and clipped on the way, slots go back at once, and the replay survives a
state_dict round trip.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.buffers.sampler_ledger import FREE, SamplerLedger
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer, TrajectoryLayout
from sampleforge.comms.messages import TrajectoryReady
from sampleforge.comms.queues import make_queue, receive
from sampleforge.learners.replay_stager import ReplayStager
from sampleforge.spaces import TensorSpec

T = 4
ROWS = 3
SLOTS = 6
WORKERS = 2
SPLITS = 2
STREAMS = WORKERS * SPLITS * ROWS
OBS_SPECS = {"img": TensorSpec((2, 2), torch.uint8), "vec": TensorSpec((3,), torch.float32)}
ACTION_SPEC = TensorSpec((1,), torch.int64)
# The sampler thread never samples: these tests read the replay themselves.
NEVER_SAMPLE = 10**9


@pytest.fixture
def buffer() -> SharedTrajectoryBuffer:
    layout = TrajectoryLayout(
        obs_specs=OBS_SPECS,
        action_spec=ACTION_SPEC,
        rnn_state_size=0,
        rollout=T,
        rows_per_slot=ROWS,
        num_slots=SLOTS,
    )
    return SharedTrajectoryBuffer(layout)


@pytest.fixture
def ledger() -> SamplerLedger:
    return SamplerLedger(num_workers=WORKERS, num_slots=SLOTS, num_policies=2)


@pytest.fixture
def slots(ledger) -> Iterator[SlotPool]:
    free = make_queue(1 << 16)
    pool = SlotPool.create(ledger, free)  # the queue starts empty: released slots show
    yield pool
    pool.close()
    free.close()


@pytest.fixture
def make_stager(buffer, slots) -> Iterator:
    made: list[ReplayStager] = []

    def make(
        *,
        reward_scale: float = 1.0,
        reward_clip: float | None = None,
        prioritized: bool = False,
        min_size_to_sample: int = NEVER_SAMPLE,
        batch_size: int = 4,
    ) -> ReplayStager:
        replay = ReplayBuffer(
            capacity=STREAMS * 32,
            num_streams=STREAMS,
            obs_specs=OBS_SPECS,
            action_spec=ACTION_SPEC,
            n_step=1,
            gamma=0.9,
            prioritized=prioritized,
        )
        limiter = SampleToInsertRatio(1.0, min_size_to_sample, error_buffer=64.0)
        sampler = BackgroundSampler(replay, limiter, batch_size=batch_size, seed=0)
        stager = ReplayStager(
            buffer,
            slots,
            sampler,
            policy_id=0,
            splits_per_worker=SPLITS,
            reward_scale=reward_scale,
            reward_clip=reward_clip,
            batches_per_take=2,
        )
        made.append(stager)
        return stager

    yield make
    for stager in made:
        stager.close()


def _obs_value(env: int, step: np.ndarray | torch.Tensor, row):
    """A value unique to (env, global step, row): consecutive rollouts of an env line up."""
    return 1000.0 * env + 10.0 * step + row


def fill(
    buffer: SharedTrajectoryBuffer,
    slot: int,
    *,
    env: int,
    rollout_index: int = 0,
    policy_ids: torch.Tensor | int = 0,
    versions: torch.Tensor | int = 0,
    rewards: torch.Tensor | float = 0.0,
) -> None:
    """Write rollout `rollout_index` of env group `env` into `slot`, as a rollout worker
    would (the slot's step 0 is the previous rollout's step T)."""
    steps = torch.arange(T + 1).view(T + 1, 1) + rollout_index * T
    rows = torch.arange(ROWS).view(1, ROWS)
    v = _obs_value(env, steps, rows).float()  # [T + 1, ROWS]
    buffer.obs["vec"][slot] = v.unsqueeze(-1) + torch.arange(3)
    buffer.obs["img"][slot] = (v % 251).to(torch.uint8).view(T + 1, ROWS, 1, 1).expand(-1, -1, 2, 2)
    buffer.actions[slot] = (steps + rows).remainder(2).unsqueeze(-1)
    buffer.rewards[slot] = rewards
    buffer.dones[slot] = 0.0
    buffer.valids[slot] = 1.0
    buffer.policy_ids[slot] = policy_ids
    buffer.policy_versions[slot] = versions


def _hand_over(slots: SlotPool, slot: int, worker: int, readers=(0,)) -> None:
    slots.ledger.take(slot, worker)
    slots.hand_over(slot, list(readers))


def _msg(slot: int, worker: int, split: int = 0, rows=None, returns_slot=True) -> TrajectoryReady:
    return TrajectoryReady(
        policy_id=0, slot=slot, rows=rows, worker=worker, returns_slot=returns_slot, split=split
    )


def _stream(worker: int, split: int, row: int) -> int:
    return (worker * SPLITS + split) * ROWS + row


def _counts(stager: ReplayStager) -> np.ndarray:
    return stager.replay.state_dict()["count"].numpy()


def _read_stream(stager: ReplayStager, stream: int, steps: int):
    tids = np.arange(steps)
    return stager.replay.read(tids * STREAMS + stream)


def test_consecutive_slots_of_one_env_make_one_stream(make_stager, buffer, slots):
    stager = make_stager()
    for slot, rollout_index in ((0, 0), (1, 1)):  # worker 1, split 1: its two rollouts
        fill(buffer, slot, env=7, rollout_index=rollout_index)
        _hand_over(slots, slot, worker=1)
        stager.add(_msg(slot, worker=1, split=1))
    fill(buffer, 2, env=3)  # another worker's env group (worker 0, split 1)
    _hand_over(slots, 2, worker=0)
    stager.add(_msg(2, worker=0, split=1))

    counts = _counts(stager)
    expected = np.zeros(STREAMS, np.int64)
    # The second rollout continues the first: no reset step between them (that would be 2T + 1).
    expected[[_stream(1, 1, r) for r in range(ROWS)]] = 2 * T
    expected[[_stream(0, 1, r) for r in range(ROWS)]] = T
    np.testing.assert_array_equal(counts, expected)
    assert stager.replay.num_sampleable == 3 * T * ROWS
    assert stager.inserted_steps == 3 * T * ROWS

    # Every transition of a continued stream in order: obs_t, action_t and obs_{t+1}.
    for row in range(ROWS):
        batch = _read_stream(stager, _stream(1, 1, row), 2 * T)
        steps = np.arange(2 * T)
        want = _obs_value(7, steps, row)
        np.testing.assert_array_equal(batch.obs["vec"][:, 0], want)
        np.testing.assert_array_equal(batch.next_obs["vec"][:, 0], want + 10.0)
        np.testing.assert_array_equal(batch.obs["img"][:, 0, 0], want % 251)
        np.testing.assert_array_equal(batch.actions[:, 0], (steps + row) % 2)
    other = _read_stream(stager, _stream(0, 1, 2), T)
    np.testing.assert_array_equal(other.obs["vec"][:, 0], _obs_value(3, np.arange(T), 2))


def test_a_slot_that_does_not_continue_its_stream_starts_it_afresh(make_stager, buffer, slots):
    stager = make_stager()
    fill(buffer, 0, env=7)
    _hand_over(slots, 0, worker=1)
    stager.add(_msg(0, worker=1))
    fill(buffer, 1, env=8)  # a replaced worker's env: obs[0] is not the stream's tail
    _hand_over(slots, 1, worker=1)
    stager.add(_msg(1, worker=1))
    # The tail became a reset step (never sampled) between the two segments.
    assert list(_counts(stager)[_stream(1, 0, 0) : _stream(1, 0, ROWS)]) == [2 * T + 1] * ROWS
    assert stager.replay.num_sampleable == 2 * T * ROWS


def test_only_this_policys_steps_and_rows_are_sampleable(make_stager, buffer, slots):
    stager = make_stager()
    policy_ids = torch.zeros(T + 1, ROWS, dtype=torch.int32)
    policy_ids[2:, 1] = 1  # row 1 changed to policy 1 at step 2
    fill(buffer, 0, env=5, policy_ids=policy_ids)
    _hand_over(slots, 0, worker=0, readers=(0, 1))
    stager.add(_msg(0, worker=0, rows=(0, 1)))  # rows where policy 0 acted

    counts = _counts(stager)
    assert list(counts[:ROWS]) == [T, T, 0]  # row 2 is not this policy's
    own = T + 2
    assert stager.replay.num_sampleable == own
    assert stager.inserted_steps == own
    valids = stager.replay.state_dict()["valids"].numpy()
    np.testing.assert_array_equal(valids[1, :T], [1, 1, 0, 0])
    # Whatever is drawn is this policy's.
    batch = stager.replay.sample(64, np.random.default_rng(0))
    played = batch.obs["vec"][:, 0]
    assert not np.isin(played, [_obs_value(5, s, 1) for s in (2, 3)]).any()


def test_rewards_are_scaled_then_clipped(make_stager, buffer, slots):
    raw = torch.tensor([-4.0, -1.0, 0.5, 3.0]).view(T, 1).expand(T, ROWS)
    rewards = torch.cat([raw, torch.zeros(1, ROWS)])
    for clip, want in ((1.0, [-1.0, -0.5, 0.25, 1.0]), (None, [-2.0, -0.5, 0.25, 1.5])):
        stager = make_stager(reward_scale=0.5, reward_clip=clip)
        fill(buffer, 0, env=1, rewards=rewards)
        _hand_over(slots, 0, worker=0)
        stager.add(_msg(0, worker=0))
        receive(slots.free_queue, timeout=1.0)
        for row in range(ROWS):
            batch = _read_stream(stager, _stream(0, 0, row), T)
            np.testing.assert_allclose(batch.returns, want)  # n = 1: the return is the reward


def test_slots_go_back_once_every_reader_has_copied(make_stager, buffer, slots, ledger):
    stager = make_stager()
    fill(buffer, 0, env=1)
    _hand_over(slots, 0, worker=0)
    stager.add(_msg(0, worker=0))
    assert not ledger.slot_readers[0].any()
    assert int(ledger.slot_owners[0]) == FREE
    assert receive(slots.free_queue, timeout=1.0) == [0]

    # Read by two policies: given back only once the other has copied it too.
    fill(buffer, 1, env=1, rollout_index=1)
    _hand_over(slots, 1, worker=0, readers=(0, 1))
    stager.add(_msg(1, worker=0))
    assert ledger.slot_readers[1].tolist() == [0, 1]
    assert receive(slots.free_queue, timeout=0.0) == []
    slots.copied(1, policy=1)
    stager.return_slots()
    assert receive(slots.free_queue, timeout=1.0) == [1]

    # A slot another learner returns is copied but never given back by this one.
    fill(buffer, 2, env=1, rollout_index=2)
    _hand_over(slots, 2, worker=0)
    stager.add(_msg(2, worker=0, returns_slot=False))
    assert not ledger.slot_readers[2].any()
    assert receive(slots.free_queue, timeout=0.0) == []


def test_lags_are_the_version_at_insert_minus_the_acting_versions(make_stager, buffer, slots):
    stager = make_stager()
    np.testing.assert_array_equal(stager.take_lags(), [0.0])  # nothing arrived yet
    versions = (torch.arange(T + 1).view(T + 1, 1) + 10 * torch.arange(ROWS)).long()
    policy_ids = torch.zeros(T + 1, ROWS, dtype=torch.int32)
    policy_ids[:, 2] = 1  # another policy's row: no lag of ours
    fill(buffer, 0, env=1, versions=versions, policy_ids=policy_ids)
    _hand_over(slots, 0, worker=0)
    stager.current_version = 40
    stager.add(_msg(0, worker=0))
    want = sorted(40 - versions[:T, :2].flatten().numpy())
    np.testing.assert_array_equal(sorted(stager.take_lags()), want)
    np.testing.assert_array_equal(sorted(stager.take_lags()), want)  # nothing new: the last

    fill(buffer, 1, env=1, rollout_index=1, versions=35)
    _hand_over(slots, 1, worker=0)
    stager.current_version = 41
    stager.add(_msg(1, worker=0))
    np.testing.assert_array_equal(stager.take_lags(), np.full(T * ROWS, 6))


def test_state_dict_round_trip_restores_the_replay(make_stager, buffer, slots):
    stager = make_stager(prioritized=True)
    for slot, k in ((0, 0), (1, 1)):
        fill(buffer, slot, env=2, rollout_index=k, rewards=float(k + 1))
        _hand_over(slots, slot, worker=1)
        stager.add(_msg(slot, worker=1, split=1))
    first = stager.replay.sample(8, np.random.default_rng(5))
    stager.replay.update_priorities(first.indices, np.arange(8.0) * 3)
    saved = io.BytesIO()
    torch.save(stager.state_dict(), saved)
    saved.seek(0)

    restored = make_stager(prioritized=True)
    restored.load_state_dict(torch.load(saved, weights_only=True))
    # (inserted_steps is the learner's to restore: its env_steps)
    assert restored.limiter.state_dict() == stager.limiter.state_dict()
    for seed in range(3):
        a = stager.replay.sample(16, np.random.default_rng(seed))
        b = restored.replay.sample(16, np.random.default_rng(seed))
        for name in ("actions", "returns", "discounts", "indices", "weights"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        for key in OBS_SPECS:
            np.testing.assert_array_equal(a.obs[key], b.obs[key])
            np.testing.assert_array_equal(a.next_obs[key], b.next_obs[key])

    # The restored streams go on where they stopped: the next rollout continues them.
    fill(buffer, 2, env=2, rollout_index=2)
    _hand_over(slots, 2, worker=1)
    restored.add(_msg(2, worker=1, split=1))
    assert list(_counts(restored)[_stream(1, 1, 0) : _stream(1, 1, ROWS)]) == [3 * T] * ROWS


def test_batches_the_sampler_drew_are_taken_until_consumed(make_stager, buffer, slots):
    stager = make_stager(min_size_to_sample=1)
    assert not stager.ready() and stager.filled == 0
    fill(buffer, 0, env=1)
    _hand_over(slots, 0, worker=0)
    stager.add(_msg(0, worker=0))
    deadline = time.monotonic() + 5.0
    while stager.filled < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert stager.ready()
    taken = stager.take()
    assert len(taken) == 2  # batches_per_take
    assert stager.take() is taken  # the same batches until consumed
    stager.consume()
    assert stager.take() is not taken
