"""Unit tests for the Batcher: finished slots -> time-major datasets (learners/batcher.py)."""

from __future__ import annotations

import pytest
import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer, TrajectoryLayout
from sampleforge.comms.messages import TrajectoryReady
from sampleforge.comms.queues import make_queue, receive
from sampleforge.learners.batcher import Batcher, Dataset
from sampleforge.spaces import TensorSpec

T = 4
ROWS = 3
SLOTS = 5
RNN = 2
CPU = torch.device("cpu")


def _value(slot: int, step, row) -> torch.Tensor:
    """A value unique to (slot, step, row)."""
    return 1000.0 * (slot + 1) + 10.0 * step + row


@pytest.fixture
def buffer() -> SharedTrajectoryBuffer:
    layout = TrajectoryLayout(
        obs_specs={"img": TensorSpec((2, 2), torch.uint8), "vec": TensorSpec((3,), torch.float32)},
        action_spec=TensorSpec((2,), torch.int64),
        rnn_state_size=RNN,
        rollout=T,
        rows_per_slot=ROWS,
        num_slots=SLOTS,
    )
    buf = SharedTrajectoryBuffer(layout)
    steps = torch.arange(T + 1).view(T + 1, 1)
    rows = torch.arange(ROWS).view(1, ROWS)
    for s in range(SLOTS):
        v = _value(s, steps, rows)  # [T + 1, ROWS]
        buf.rewards[s] = v
        buf.dones[s] = v + 0.1
        buf.valids[s] = v + 0.2
        buf.log_probs[s] = -v
        buf.values[s] = v + 0.5
        buf.policy_versions[s] = v.long()
        buf.policy_ids[s] = 0
        buf.actions[s] = torch.stack([v.long(), -v.long()], dim=-1)
        buf.rnn_states[s] = v.unsqueeze(-1).expand(T + 1, ROWS, RNN) + torch.arange(RNN)
        buf.obs["vec"][s] = v.unsqueeze(-1) + torch.arange(3)
        buf.obs["img"][s] = (10 * s + steps + rows).to(torch.uint8).view(T + 1, ROWS, 1, 1)
    return buf


@pytest.fixture
def free_slots():
    q = make_queue(1 << 16)
    yield q
    q.close()


@pytest.fixture
def ledger() -> SamplerLedger:
    return SamplerLedger(num_workers=2, num_slots=SLOTS, num_policies=2)


@pytest.fixture
def slots(ledger, free_slots) -> SlotPool:
    return SlotPool.create(ledger, free_slots)


def _msg(slot: int, rows: int = ROWS) -> TrajectoryReady:
    return TrajectoryReady(
        policy_id=0, slot=slot, rows=None if rows == ROWS else tuple(range(rows)), worker=slot % 2
    )


def _expected_columns(buffer, arrivals):
    """(slot, row) per dataset column, in arrival order."""
    return [(slot, row) for slot, rows in arrivals for row in range(rows)]


def _check_columns(dataset: Dataset, buffer: SharedTrajectoryBuffer, columns) -> None:
    for col, (slot, row) in enumerate(columns):
        for name, src in buffer.fields().items():
            got = (
                dataset.obs[name.removeprefix("obs.")]
                if name.startswith("obs.")
                else getattr(dataset, name)
            )
            assert torch.equal(got[:, col], src[slot, :, row]), (name, col, slot, row)


def test_ready_take_and_slot_return(buffer, slots):
    batcher = Batcher(buffer, slots, dataset_trajectories=5, device=CPU)
    assert not batcher.ready()
    batcher.add(_msg(slot=3))
    assert batcher.filled == 3 and not batcher.ready()
    batcher.add(_msg(slot=1, rows=2))
    assert batcher.filled == 5 and batcher.ready()

    dataset = batcher.take()
    assert dataset.num_trajectories == 5
    assert dataset.rewards.shape == (T + 1, 5)
    assert dataset.actions.shape == (T + 1, 5, 2)
    assert dataset.rnn_states.shape == (T + 1, 5, RNN)
    assert dataset.obs["vec"].shape == (T + 1, 5, 3)
    assert dataset.obs["img"].shape == (T + 1, 5, 2, 2)
    assert dataset.obs["img"].dtype == torch.uint8
    assert dataset.policy_versions.dtype == torch.int64
    assert set(dataset.obs) == {"img", "vec"}
    _check_columns(dataset, buffer, _expected_columns(buffer, [(3, 3), (1, 2)]))

    # slots went back to the free list at once, in the order they were copied
    assert receive(slots.free_queue, timeout=1.0) == [3, 1]


def test_dataset_is_a_copy_not_a_view_of_the_slot(buffer, slots):
    batcher = Batcher(buffer, slots, dataset_trajectories=3, device=CPU)
    batcher.add(_msg(slot=0))
    expected = buffer.rewards[0].clone()
    buffer.rewards[0].fill_(-5.0)  # a rollout worker reuses the slot
    assert torch.equal(batcher.take().rewards, expected)


def test_consume_keeps_extra_rows_for_next_dataset(buffer, slots):
    batcher = Batcher(buffer, slots, dataset_trajectories=4, device=CPU)
    batcher.add(_msg(slot=2))  # 3 rows
    assert not batcher.ready()
    batcher.add(_msg(slot=0))  # 3 more: 6 >= 4, two rows are extra
    assert batcher.ready() and batcher.filled == 6
    first = batcher.take()
    _check_columns(first, buffer, [(2, 0), (2, 1), (2, 2), (0, 0)])

    batcher.consume()
    assert batcher.filled == 2 and not batcher.ready()
    batcher.add(_msg(slot=4, rows=2))
    assert batcher.ready() and batcher.filled == 4
    second = batcher.take()
    _check_columns(second, buffer, [(0, 1), (0, 2), (4, 0), (4, 1)])
    batcher.consume()
    assert batcher.filled == 0 and not batcher.ready()
    assert receive(slots.free_queue, timeout=1.0) == [2, 0, 4]


def test_consume_exact_dataset_leaves_nothing(buffer, slots):
    batcher = Batcher(buffer, slots, dataset_trajectories=6, device=CPU)
    batcher.add(_msg(slot=1))
    batcher.add(_msg(slot=2))
    assert batcher.ready()
    batcher.take()
    batcher.consume()
    assert batcher.filled == 0 and not batcher.ready()
    batcher.add(_msg(slot=3))
    batcher.add(_msg(slot=4))
    _check_columns(batcher.take(), buffer, _expected_columns(buffer, [(3, 3), (4, 3)]))


def test_many_datasets_in_a_row(buffer, slots):
    """Rows stream through several datasets in exactly their arrival order."""
    batcher = Batcher(buffer, slots, dataset_trajectories=5, device=CPU)
    arrivals = [(s % SLOTS, 1 + (s % ROWS)) for s in range(12)]
    order = _expected_columns(buffer, arrivals)
    seen = []
    for slot, rows in arrivals:
        batcher.add(_msg(slot, rows))
        while batcher.ready():
            dataset = batcher.take()
            seen.extend(order[len(seen) : len(seen) + 5])
            _check_columns(dataset, buffer, seen[-5:])
            batcher.consume()
    assert len(seen) == (len(order) // 5) * 5
    assert batcher.filled == len(order) - len(seen)
    assert receive(slots.free_queue, timeout=1.0) == [slot for slot, _ in arrivals]


def test_datasets_that_grow_midway_keep_every_row_in_arrival_order(buffer, slots):
    """`set_dataset_trajectories` between datasets (DatasetSizer): later datasets are larger,
    and no row is lost or reordered across the change."""
    batcher = Batcher(
        buffer, slots, dataset_trajectories=2, device=CPU, largest_dataset_trajectories=8
    )
    arrivals = [(s % SLOTS, ROWS) for s in range(12)]
    order = _expected_columns(buffer, arrivals)
    sizes, seen = [], 0
    for slot, rows in arrivals:
        batcher.add(_msg(slot, rows))
        while batcher.ready():
            dataset = batcher.take()
            size = dataset.num_trajectories
            _check_columns(dataset, buffer, order[seen : seen + size])
            seen += size
            sizes.append(size)
            batcher.consume()
            batcher.set_dataset_trajectories(min(2 * size, 8))
    assert sizes[:3] == [2, 4, 8] and set(sizes[3:]) == {8}
    assert batcher.filled == len(order) - seen
    with pytest.raises(ValueError, match="does not fit the staging areas"):
        batcher.set_dataset_trajectories(9)


def test_a_learner_slower_than_the_sampler_keeps_both_areas_within_their_room(buffer, slots):
    """The learner takes a dataset only when the batcher has no room left (arrivals always
    waiting). Rows beyond a dataset must not pile up from one dataset to the next (they once
    did, by a slot's overflow a dataset, until a copy found the back area full), and every
    dataset holds the oldest rows staged."""
    d = 4
    batcher = Batcher(buffer, slots, dataset_trajectories=d, device=CPU)
    arrivals = [(s % SLOTS, ROWS) for s in range(40)]
    order = _expected_columns(buffer, arrivals)
    seen = 0
    for slot, rows in arrivals:
        if not batcher.has_room():
            _check_columns(batcher.take(), buffer, order[seen : seen + d])
            seen += d
            batcher.consume()
        assert batcher.has_room()
        batcher.add(_msg(slot, rows))
        assert batcher.filled < 2 * d + ROWS
    assert seen >= 20 * d
    assert batcher.filled == len(order) - seen


@pytest.mark.parametrize("grown", [3, 8])
def test_a_dataset_grown_with_rows_waiting_starts_with_the_oldest(buffer, slots, grown):
    """`set_dataset_trajectories` while both areas hold rows: the next dataset is the oldest
    rows staged, and none is lost."""
    batcher = Batcher(
        buffer, slots, dataset_trajectories=2, device=CPU, largest_dataset_trajectories=8
    )
    arrivals = [(s % SLOTS, ROWS) for s in range(4)]
    order = _expected_columns(buffer, arrivals)
    for slot, rows in arrivals[:2]:
        batcher.add(_msg(slot, rows))  # 6 rows: a dataset of 2 in front, 4 behind it
    _check_columns(batcher.take(), buffer, order[:2])
    batcher.consume()
    batcher.set_dataset_trajectories(grown)
    for slot, rows in arrivals[2:]:
        batcher.add(_msg(slot, rows))
    _check_columns(batcher.take(), buffer, order[2 : 2 + grown])
    batcher.consume()
    assert batcher.filled == len(order) - 2 - grown


def test_select_picks_columns(buffer, slots):
    batcher = Batcher(buffer, slots, dataset_trajectories=6, device=CPU)
    batcher.add(_msg(slot=0))
    batcher.add(_msg(slot=3))
    dataset = batcher.take()
    index = torch.tensor([4, 0, 2])
    mini = dataset.select(index)
    assert isinstance(mini, Dataset)
    assert mini.num_trajectories == 3
    assert set(mini.obs) == set(dataset.obs)
    for name in (
        "actions",
        "rnn_states",
        "rewards",
        "dones",
        "valids",
        "log_probs",
        "values",
        "policy_versions",
    ):
        assert torch.equal(getattr(mini, name), getattr(dataset, name)[:, index]), name
    for key in dataset.obs:
        assert torch.equal(mini.obs[key], dataset.obs[key][:, index]), key
    _check_columns(mini, buffer, [(3, 1), (0, 0), (0, 2)])


def test_rows_shared_by_policies_keep_only_own_steps_and_the_last_reader_frees_the_slot(
    buffer, slots
):
    """Slot 2: rows 0 and 1 are policy 1's until step 2, where row 1 starts an episode played
    by policy 0; row 2 is policy 0's throughout. Policy 0 copies rows 1 and 2, policy 1 rows 0
    and 1; the slot is free only after both copied."""
    buffer.policy_ids[2] = 0
    buffer.policy_ids[2, :2, :2] = 1
    slots.ledger.hand_over(2, readers=[0, 1])
    p0 = Batcher(buffer, slots, dataset_trajectories=2, device=CPU, policy_id=0)
    p1 = Batcher(buffer, slots, dataset_trajectories=2, device=CPU, policy_id=1)
    p0.add(TrajectoryReady(policy_id=0, slot=2, rows=(1, 2), worker=0, returns_slot=True))
    assert receive(slots.free_queue, timeout=0.05) == []  # policy 1 has not copied yet
    p1.add(TrajectoryReady(policy_id=1, slot=2, rows=(0, 1), worker=0, returns_slot=False))
    assert receive(slots.free_queue, timeout=0.05) == []  # only policy 0 returns it...
    p0.return_slots()
    assert receive(slots.free_queue, timeout=1.0) == [2]  # ...once both copied, and only once
    p1.return_slots()
    assert receive(slots.free_queue, timeout=0.05) == []
    mine0, mine1 = p0.take(), p1.take()
    assert torch.equal(mine0.rewards[:, 0], buffer.rewards[2, :, 1])
    # Row 1: steps 0-1 belong to policy 1, the rest to policy 0.
    assert (mine0.valids[:2, 0] == 0).all() and (mine0.valids[2:T, 0] > 0).all()
    assert (mine1.valids[:2, 1] > 0).all() and (mine1.valids[2:T, 1] == 0).all()
    assert (mine0.valids[:T, 1] > 0).all()  # row 2: all policy 0's
    assert (mine1.valids[:T, 0] == 0).sum() == T - 2  # row 0: policy 1's for two steps


@pytest.mark.gpu
def test_on_cuda_rows_travel_through_pinned_memory_on_a_copy_stream_and_arrive_whole(buffer, slots):
    """StagingCopy on CUDA: rows staged while the compute stream is busy arrive intact and in
    order, across growing datasets and the overflow carried from one area to the other."""
    cuda = torch.device("cuda")
    batcher = Batcher(
        buffer, slots, dataset_trajectories=2, device=cuda, largest_dataset_trajectories=8
    )
    assert batcher._copier.stream is not None
    assert all(t.is_pinned() for bounce in batcher._copier._bounce for t in bounce.values())
    arrivals = [(s % SLOTS, 1 + s % ROWS) for s in range(40)]
    order = _expected_columns(buffer, arrivals)
    seen = 0
    busy = torch.randn(2048, 2048, device=cuda)
    for slot, rows in arrivals:
        busy = busy @ busy / 2048  # queue compute work on the current stream meanwhile
        batcher.add(_msg(slot, rows))
        while batcher.ready():
            dataset = batcher.take().to(CPU)
            size = dataset.num_trajectories
            _check_columns(dataset, buffer, order[seen : seen + size])
            seen += size
            batcher.consume()
            batcher.set_dataset_trajectories(min(2 * size, 8))
    assert seen > 8 and batcher.filled == len(order) - seen
