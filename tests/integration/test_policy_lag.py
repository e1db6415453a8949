"""Back-pressure bounds policy lag when the learner is the slow part, without dropping samples.

The learner here does 4 epochs x 2 minibatches over each dataset with a 256x256 MLP: about a
dozen forward passes' worth of work per sample against one for inference, while CartPole costs
nothing to step, so sampling could run far ahead. Without back-pressure the trajectories pile up
and the lag climbs to `max_policy_lag`, where samples start being dropped.
"""

from __future__ import annotations

import pytest

from sampleforge.config import make_config
from sampleforge.learners.sampling_gate import measured_lead_bound
from sampleforge.testing.training_runs import train_reading_reports

pytestmark = (
    pytest.mark.exclusive
)  # a deliberately slow learner against sampling speed: the lag bounds assume an unshared machine

EPOCHS, MINIBATCHES = 4, 2
STEPS_PER_DATASET = EPOCHS * MINIBATCHES


def _lead_bound(lead):
    """The lead sampling may take: the one set, or the most a measured one may grow to."""
    return lead if lead is not None else measured_lead_bound(STEPS_PER_DATASET)


def _lag_bound(lead):
    """The most SGD steps a sample may wait: its own dataset's epochs, the lead before it, and
    one more dataset for slots that several workers started at once, each one more than asked
    (those trajectories wait for the dataset after next)."""
    return 2 * STEPS_PER_DATASET + _lead_bound(lead)


def _run(tmp_path, lead):
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        seed=1,
        device="cpu",
        num_workers=2,
        num_envs_per_worker=32,
        rollout=32,
        batch_size=512,
        num_batches_per_epoch=MINIBATCHES,
        num_epochs=EPOCHS,
        mlp_hidden_sizes=(256, 256),
        sampling_lead_sgd_steps=lead,
        # Dropping starts just past the bound back-pressure keeps to: a sample dropped means
        # the bound failed (below it, a sample the gate allowed would be dropped).
        max_policy_lag=_lag_bound(lead),
        train_for_env_steps=100_000,
        stop_at_mean_return=float("inf"),
        report_every_sec=1,
        tensorboard=False,
    )
    return train_reading_reports(cfg)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("lead", [2, None], ids=["lead2", "measured"])
def test_a_slow_learner_gets_fresh_samples_and_drops_none(tmp_path, lead):
    summary, rows = _run(tmp_path, lead)
    assert len(rows) >= 3
    assert summary.mean_policy_lag is not None
    # A dataset's samples were acted by at most `lead` steps before its first SGD step, and
    # its last minibatch trains STEPS_PER_DATASET - 1 steps later: mean about (8 + lead) / 2.
    # A measured lead stops where that mean would pass the lag target.
    assert summary.mean_policy_lag <= (STEPS_PER_DATASET + _lead_bound(lead)) / 2 + 1
    for row in rows:
        assert float(row["learner/dropped_stale_fraction"]) == 0.0, row
        assert float(row["policy_lag/max"]) <= _lag_bound(lead), row
