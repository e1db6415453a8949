"""A PBT round that copies weights is checkpointed at once, and the PBT state on disk is the one
asked for with the newest checkpoints: a run lost between a round and the next periodic
checkpoint would otherwise resume with the round done and its copies never made.

Serial mode, 2 policies on CartPole, periodic checkpoints far apart (they never come due)."""

from __future__ import annotations

import json

import pytest

from sampleforge import APPO
from sampleforge.pbt import HISTORY_FILENAME, PbtHistory
from sampleforge.pbt.coordinator import PBT_STATE_FILENAME

pytestmark = pytest.mark.timeout(180)

PERIOD = 3_000


def _checkpoint_steps(directory) -> list[int]:
    """Env steps of the periodic checkpoints (checkpoint_<version>_<env steps>.pt)."""
    return sorted(int(p.stem.rsplit("_", 1)[1]) for p in directory.glob("checkpoint_*.pt"))


def test_a_round_that_copies_weights_is_checkpointed_with_its_state(tmp_path):
    with APPO(
        "CartPole-v1",
        serial_mode=True,
        train_dir=str(tmp_path),
        num_policies=2,
        with_pbt=True,
        pbt_period_env_steps=PERIOD,
        save_every_sec=1e6,
        num_envs_per_worker=4,
        batch_size=256,
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
        seed=1,
    ) as population:
        population.train(PERIOD + 2_000)
        exp = population.experiment_dir
    copies = [e for e in PbtHistory.read(exp / HISTORY_FILENAME) if e.kind == "replace"]
    assert copies, "no policy copied another: the round this test is about did not happen"
    # One checkpoint asked for right after the round, and the final one at the end of the call
    # (a policy's checkpoints count its own env steps, the round the run's).
    steps = _checkpoint_steps(exp / "checkpoints" / f"p{copies[0].policy}")
    assert len(steps) == 2 and steps[0] < steps[1], steps
    state = json.loads((exp / PBT_STATE_FILENAME).read_text())
    assert state["rounds"] == 1, state
