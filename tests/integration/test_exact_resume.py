"""Serial mode, fixed seed: N env steps straight equal N/2 + restart + N/2, bit for bit.

Run A trains N steps in one go. Run B trains N/2, exits (writing its checkpoint and the
serial-mode snapshot of envs, slots, queues and random streams), and a new Runner resumes it to
N. The final checkpoints must hold identical parameters, optimizer state and counters. Without
the snapshot, the same resume differs (so the comparison can fail). For APPO, and for DQN,
whose replay, rate limiter and sampler (its random stream and the batches drawn ahead) are in
the snapshot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sampleforge.checkpoint.serial_snapshot import SNAPSHOT_FILENAME
from sampleforge.checkpoint.store import CheckpointStore
from sampleforge.components.runner import Runner
from sampleforge.config import make_config

N = 24_576  # 24 learner iterations of 1024 samples
# A small replay run: its updates start after 256 transitions, 2 samples per insert.
DQN = dict(
    algorithm="dqn",
    learning_starts=256,
    batch_size=32,
    samples_per_insert=2.0,
    num_workers=1,
    num_envs_per_worker=4,
)
RUNS = {"appo": (N, {}), "dqn": (4096, DQN)}


def _train(train_dir: Path, steps: int, **settings):
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(train_dir),
        experiment="exact",
        serial_mode=True,
        seed=7,
        device="cpu",
        train_for_env_steps=steps,
        stop_at_mean_return=float("inf"),
        report_every_sec=60,
        tensorboard=False,
        **settings,
    )
    with Runner(cfg) as runner:
        return runner.train()


def _final_state(train_dir: Path) -> dict:
    store = CheckpointStore(train_dir / "exact" / "checkpoints" / "p0")
    state, _ = store.load_latest()
    return state


def _assert_identical(a: dict, b: dict) -> None:
    assert a["env_steps"] == b["env_steps"] and a["policy_version"] == b["policy_version"] > 0
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for param, moments in a["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(
                torch.as_tensor(value), torch.as_tensor(b["optimizer"]["state"][param][key])
            ), (param, key)


def _differs(a: dict, b: dict) -> bool:
    try:
        _assert_identical(a, b)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_half_restart_half_equals_straight_bitwise(tmp_path, algorithm):
    steps, settings = RUNS[algorithm]
    straight = _train(tmp_path / "straight", steps, **settings)
    half = _train(tmp_path / "halves", steps // 2, **settings)
    assert half.env_steps < steps * 0.6
    assert (tmp_path / "halves" / "exact" / SNAPSHOT_FILENAME).exists()
    resumed = _train(tmp_path / "halves", steps, **settings)
    assert resumed.env_steps == straight.env_steps
    _assert_identical(_final_state(tmp_path / "straight"), _final_state(tmp_path / "halves"))


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_without_the_snapshot_a_resume_is_not_exact(tmp_path, algorithm):
    steps, settings = RUNS[algorithm]
    _train(tmp_path / "straight", steps, **settings)
    _train(tmp_path / "halves", steps // 2, **settings)
    (tmp_path / "halves" / "exact" / SNAPSHOT_FILENAME).unlink()
    _train(tmp_path / "halves", steps, **settings)
    assert _differs(_final_state(tmp_path / "straight"), _final_state(tmp_path / "halves"))
