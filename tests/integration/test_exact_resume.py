"""Serial mode, fixed seed: N env steps straight equal N/2 + restart + N/2, bit for bit.

Run A trains N steps in one go. Run B trains N/2, exits (writing its checkpoint and the
serial-mode snapshot of envs, slots, queues and random streams), and a new Runner resumes it to
N. The final checkpoints must hold identical parameters, optimizer state and counters. Without
the snapshot, the same resume differs (so the comparison can fail).
"""

from __future__ import annotations

from pathlib import Path

import torch

from sampleforge.checkpoint.serial_snapshot import SNAPSHOT_FILENAME
from sampleforge.checkpoint.store import CheckpointStore
from sampleforge.components.runner import Runner
from sampleforge.config import make_config

N = 24_576  # 24 learner iterations of 1024 samples


def _train(train_dir: Path, steps: int):
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
    )
    with Runner(cfg) as runner:
        return runner.train()


def _final_state(train_dir: Path) -> dict:
    store = CheckpointStore(train_dir / "exact" / "checkpoints" / "p0")
    state, _ = store.load_latest()
    return state


def _assert_identical(a: dict, b: dict) -> None:
    assert a["env_steps"] == b["env_steps"] and a["policy_version"] == b["policy_version"]
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


def test_half_restart_half_equals_straight_bitwise(tmp_path):
    straight = _train(tmp_path / "straight", N)
    half = _train(tmp_path / "halves", N // 2)
    assert half.env_steps < N * 0.6
    assert (tmp_path / "halves" / "exact" / SNAPSHOT_FILENAME).exists()
    resumed = _train(tmp_path / "halves", N)
    assert resumed.env_steps == straight.env_steps
    _assert_identical(_final_state(tmp_path / "straight"), _final_state(tmp_path / "halves"))


def test_without_the_snapshot_a_resume_is_not_exact(tmp_path):
    _train(tmp_path / "straight", N)
    _train(tmp_path / "halves", N // 2)
    (tmp_path / "halves" / "exact" / SNAPSHOT_FILENAME).unlink()
    _train(tmp_path / "halves", N)
    assert _differs(_final_state(tmp_path / "straight"), _final_state(tmp_path / "halves"))
