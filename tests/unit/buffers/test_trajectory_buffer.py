"""Unit tests for the shared trajectory buffer (sampleforge/buffers/trajectory_buffer.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as torch_mp
from gymnasium import spaces as gym_spaces

from sampleforge.buffers.trajectory_buffer import (
    SharedTrajectoryBuffer,
    TrajectoryLayout,
    slots_needed,
)
from sampleforge.spaces import TensorSpec, action_spec

ROLLOUT = 5
ROWS = 3
SLOTS = 4
IMAGE = (3, 6, 7)
VECTOR = (5,)


def make_layout(rnn_size: int = 8, num_slots: int = SLOTS) -> TrajectoryLayout:
    return TrajectoryLayout(
        obs_specs={
            "image": TensorSpec(IMAGE, torch.uint8),
            "vector": TensorSpec(VECTOR, torch.float32),
        },
        action_spec=action_spec(gym_spaces.MultiDiscrete([3, 4, 2])),
        rnn_state_size=rnn_size,
        rollout=ROLLOUT,
        rows_per_slot=ROWS,
        num_slots=num_slots,
    )


@pytest.fixture(params=[0, 8], ids=["rnn0", "rnn8"])
def buffer(request) -> SharedTrajectoryBuffer:
    return SharedTrajectoryBuffer(make_layout(rnn_size=request.param))


def test_shapes_and_dtypes(buffer):
    rnn = buffer.layout.rnn_state_size
    lead = (SLOTS, ROLLOUT + 1, ROWS)
    assert buffer.rollout == ROLLOUT
    assert set(buffer.obs) == {"image", "vector"}
    assert buffer.obs["image"].shape == lead + IMAGE
    assert buffer.obs["image"].dtype == torch.uint8
    assert buffer.obs["vector"].shape == lead + VECTOR
    assert buffer.obs["vector"].dtype == torch.float32
    assert buffer.actions.shape == lead + (3,)  # MultiDiscrete with 3 components
    assert buffer.actions.dtype == torch.int64
    assert buffer.rnn_states.shape == lead + (rnn,)
    assert buffer.rnn_states.dtype == torch.float32
    for name in ("rewards", "dones", "log_probs", "values"):
        t = getattr(buffer, name)
        assert t.shape == lead and t.dtype == torch.float32, name
    assert buffer.policy_versions.shape == lead
    assert buffer.policy_versions.dtype == torch.int64


def test_fields_lists_every_tensor(buffer):
    fields = buffer.fields()
    assert set(fields) == {
        "obs.image",
        "obs.vector",
        "actions",
        "rnn_states",
        "rewards",
        "dones",
        "valids",
        "log_probs",
        "values",
        "policy_versions",
        "policy_ids",
    }
    assert fields["obs.image"] is buffer.obs["image"]
    assert fields["rewards"] is buffer.rewards
    assert fields["policy_versions"] is buffer.policy_versions


def test_fresh_memory_is_poisoned(buffer):
    for name, tensor in buffer.fields().items():
        if tensor.dtype.is_floating_point:
            assert torch.isnan(tensor).all(), name
        elif tensor.dtype == torch.uint8:
            assert (tensor == 255).all(), name
        else:
            assert (tensor == -1).all(), name
    # every kind of poison is actually exercised
    assert buffer.obs["image"].numel() > 0 and buffer.actions.numel() > 0
    assert buffer.policy_versions.numel() > 0


def test_tensors_are_in_shared_memory(buffer):
    for name, tensor in buffer.fields().items():
        assert tensor.is_shared(), name
        assert tensor.device.type == "cpu", name
        assert tensor.is_contiguous(), name


def test_separate_buffers_do_not_alias():
    a = SharedTrajectoryBuffer(make_layout())
    b = SharedTrajectoryBuffer(make_layout())
    a.rewards.fill_(1.0)
    assert torch.isnan(b.rewards).all()


def test_carry_over_copies_last_step_to_first(buffer):
    T = ROLLOUT
    rnn = buffer.layout.rnn_state_size
    image = torch.randint(0, 255, (ROWS,) + IMAGE, dtype=torch.uint8)
    vector = torch.randn((ROWS,) + VECTOR)
    state = torch.randn(ROWS, rnn)
    buffer.obs["image"][1, T] = image
    buffer.obs["vector"][1, T] = vector
    buffer.rnn_states[1, T] = state
    before = {k: v.clone() for k, v in buffer.fields().items()}

    buffer.carry_over(from_slot=1, to_slot=3)

    assert torch.equal(buffer.obs["image"][3, 0], image)
    assert torch.equal(buffer.obs["vector"][3, 0], vector)
    assert torch.equal(buffer.rnn_states[3, 0], state)
    # exactly step 0 of the target slot's observations and recurrent state changed
    for name, tensor in buffer.fields().items():
        expected = before[name].clone()
        if name in ("obs.image", "obs.vector", "rnn_states"):
            expected[3, 0] = expected[1, T]
        torch.testing.assert_close(tensor, expected, rtol=0, atol=0, equal_nan=True, msg=name)


def test_nbytes_matches_allocated_tensors(buffer):
    actual = sum(t.numel() * t.element_size() for t in buffer.fields().values())
    assert buffer.layout.nbytes() == actual


def test_nbytes_scales_with_slots():
    one = make_layout(num_slots=1).nbytes()
    assert make_layout(num_slots=7).nbytes() == 7 * one


def test_slots_needed_examples():
    # 4 splits, 8 rows per slot, rollout 32, dataset 1024 samples = 32 trajectories = 4 slots
    assert slots_needed(4, 8, 32, 1024) == 2 * 4 + 2 * 4
    # a dataset smaller than one trajectory still counts as one
    assert slots_needed(1, 4, 32, 8) == 2 + 2


@pytest.mark.parametrize(
    "rows, rollout, dataset", [(1, 1, 1), (8, 32, 1024), (3, 16, 100), (64, 4, 4096)]
)
def test_slots_needed_monotone_in_splits_and_two_per_split(rows, rollout, dataset):
    previous = 0
    for splits in range(1, 40):
        n = slots_needed(splits, rows, rollout, dataset)
        assert n >= 2 * splits
        assert n > previous  # strictly more slots for more splits
        previous = n


def test_slots_needed_covers_a_dataset():
    for splits, rows, rollout, dataset in [(1, 1, 8, 800), (2, 5, 10, 730), (3, 16, 32, 4096)]:
        n = slots_needed(splits, rows, rollout, dataset)
        trajectories = dataset // rollout
        # the slots beyond the two per split hold at least a dataset of trajectories
        assert (n - 2 * splits) * rows >= trajectories
        # more rows per slot never needs more slots; a bigger dataset never needs fewer
        assert slots_needed(splits, rows + 1, rollout, dataset) <= n
        assert slots_needed(splits, rows, rollout, dataset * 2) >= n
        assert math.isfinite(n) and isinstance(n, int)


# --- across processes -------------------------------------------------------------------------
@pytest.fixture
def spawnable(monkeypatch):
    """Spawned children unpickle this module's functions by module name: make it importable
    (plain `pytest` does not put the rootdir on sys.path; the child inherits the parent's)."""
    root = Path(__file__).resolve().parents[len(__name__.split(".")) - 1]
    monkeypatch.syspath_prepend(str(root))


def _write_in_child(buffer: SharedTrajectoryBuffer, slot: int) -> None:
    buffer.rewards[slot].fill_(3.5)
    buffer.obs["image"][slot, 0, 0].fill_(7)
    buffer.actions[slot, ROLLOUT, ROWS - 1] = torch.tensor([2, 3, 1])
    buffer.policy_versions[slot] = 11
    buffer.carry_over(slot, slot + 1)


def test_child_process_writes_are_visible_to_parent(spawnable):
    buffer = SharedTrajectoryBuffer(make_layout())
    buffer.obs["image"][1, ROLLOUT] = 9
    ctx = torch_mp.get_context("spawn")
    proc = ctx.Process(target=_write_in_child, args=(buffer, 1), daemon=True)
    proc.start()
    proc.join(timeout=60)
    if proc.is_alive():
        proc.kill()
        proc.join()
    assert proc.exitcode == 0
    assert (buffer.rewards[1] == 3.5).all()
    assert torch.isnan(buffer.rewards[0]).all() and torch.isnan(buffer.rewards[2]).all()
    assert (buffer.obs["image"][1, 0, 0] == 7).all()
    assert (buffer.obs["image"][1, 0, 1] == 255).all()
    assert buffer.actions[1, ROLLOUT, ROWS - 1].tolist() == [2, 3, 1]
    assert (buffer.policy_versions[1] == 11).all()
    assert (buffer.obs["image"][2, 0] == 9).all()  # carry_over done by the child
    np.testing.assert_array_equal(buffer.rewards[1].numpy(), np.full((ROLLOUT + 1, ROWS), 3.5))
