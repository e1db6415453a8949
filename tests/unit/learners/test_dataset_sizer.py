"""Unit tests for DatasetSizer: datasets that grow while the run is lag-bound
(learners/dataset_sizer.py)."""

from __future__ import annotations

import pytest

from sampleforge.learners.dataset_sizer import GROW_WAIT_SHARE, WINDOW, DatasetSizer


class _Follower:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def set_dataset_trajectories(self, trajectories: int) -> None:
        self.sizes.append(trajectories)


def _window(sizer: DatasetSizer, busy: float, waited: float, at_cap: bool = True) -> int:
    size = sizer.trajectories
    for _ in range(WINDOW):
        size = sizer.dataset_trained(busy, waited, at_cap)
    return size


def test_a_lag_bound_window_doubles_the_datasets_and_tells_the_followers():
    follower = _Follower()
    sizer = DatasetSizer(smallest=4, largest=16, followers=(follower,))
    for _ in range(WINDOW - 1):  # no decision before a whole window
        assert sizer.dataset_trained(1.0, 1.0, True) == 4
    assert sizer.dataset_trained(1.0, 1.0, True) == 8
    assert _window(sizer, busy=1.0, waited=1.0) == 16
    assert _window(sizer, busy=1.0, waited=1.0) == 16  # the staging areas' bound
    assert follower.sizes == [8, 16]


@pytest.mark.parametrize(
    "waited, at_cap",
    [
        (0.9 * GROW_WAIT_SHARE / (1 - GROW_WAIT_SHARE), True),  # waits, but not enough
        (1.0, False),  # the gate could still lengthen the lead instead
    ],
)
def test_no_growth_unless_the_lead_is_capped_and_the_learner_waits(waited, at_cap):
    follower = _Follower()
    sizer = DatasetSizer(smallest=4, largest=16, followers=(follower,))
    for _ in range(3):
        assert _window(sizer, busy=1.0, waited=waited, at_cap=at_cap) == 4
    assert follower.sizes == []


def test_one_dataset_below_the_cap_holds_the_window_back():
    sizer = DatasetSizer(smallest=4, largest=16)
    for i in range(WINDOW):
        sizer.dataset_trained(1.0, 1.0, i != 3)
    assert sizer.trajectories == 4


def test_sizes_must_be_ordered():
    with pytest.raises(ValueError, match="0 < 8 <= 4"):
        DatasetSizer(smallest=8, largest=4)


def test_a_saved_size_is_taken_up_within_this_runs_bounds_and_told_to_the_followers():
    follower = _Follower()
    sizer = DatasetSizer(smallest=4, largest=16)
    _window(sizer, busy=1.0, waited=1.0)
    resumed = DatasetSizer(smallest=4, largest=16, followers=(follower,))
    resumed.load_state_dict(sizer.state_dict())
    assert (resumed.trajectories, follower.sizes) == (8, [8])
    smaller = DatasetSizer(smallest=4, largest=4, followers=(follower,))
    smaller.load_state_dict(sizer.state_dict())  # resumed with a smaller max_batch_size
    assert (smaller.trajectories, follower.sizes) == (4, [8])
