"""Datasets that grow with the learner's speed (`max_batch_size`, learners/dataset_sizer.py).

With the sampling lead held at 0, rollout workers only sample while the learner waits, so a
small learner on CartPole spends most of its time waiting: the run is lag-bound, and its
datasets must double until they reach `max_batch_size x num_batches_per_epoch`, without a
sample trained on twice or dropped as stale.
"""

from __future__ import annotations

import pytest

from sampleforge.config import make_config
from sampleforge.testing.training_runs import train_reading_reports

BATCH, LARGEST = 64, 256


def _run(tmp_path, **settings):
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        seed=1,
        device="cpu",
        num_workers=2,
        num_envs_per_worker=8,
        rollout=16,
        batch_size=BATCH,
        num_batches_per_epoch=1,
        num_epochs=1,
        sampling_lead_sgd_steps=0,
        train_for_env_steps=25_000,
        stop_at_mean_return=float("inf"),
        report_every_sec=1,
        tensorboard=False,
        **settings,
    )
    return train_reading_reports(cfg)


@pytest.mark.timeout(180)
def test_a_lag_bound_run_grows_its_datasets_to_the_largest_and_drops_no_sample(tmp_path):
    summary, rows = _run(tmp_path, max_batch_size=LARGEST)
    sizes = [float(r["learner/dataset_size"]) for r in rows]
    assert sizes and sizes[-1] == LARGEST, sizes
    assert sizes == sorted(sizes)  # datasets only grow
    assert summary.env_steps >= 25_000
    for row in rows:
        assert float(row["learner/dropped_stale_fraction"]) == 0.0, row
