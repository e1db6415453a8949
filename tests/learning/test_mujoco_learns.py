"""InvertedPendulum-v5 reaches Gymnasium's solve line, 950 (last 100 episodes), within 300k steps.

Nothing but the continuous family's settings: ``mujoco_preset()`` (CleanRL's PPO recipe: GAE,
10 epochs of 32 minibatches of 64 over 2,048-sample datasets, separate 64x64 tanh MLPs,
normalised observations) plus return normalisation, run asynchronously with the default two
rollout workers. The return is 1 per step the pole stays up, at most 1000.

Measured on the 2-core machine (2026-11-25, seeds 1-3): solved at 135k, 127k and 127k agent
steps in 63-71 s; the budget (the linear learning-rate decay is tied to it) leaves ~2x
headroom. (With the earlier 2 minibatches of 1,024: 139k-152k steps in 20 s each.) The
policy lag (185-198 SGD steps then) is mostly the recipe's own 320 SGD steps per dataset.

A benchmark (`pytest -m benchmark tests/learning`), not part of the CI suite since 2026-11-27:
it took 140 s of the suite's 21 minutes on a slow 2-core machine, where the suite must stay
under 15. The family's HalfCheetah and Hopper curves (1M steps) are in docs/benchmarks.md.
"""

from importlib.util import find_spec

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.config.sources import config_sources
from sampleforge.envs.mujoco import mujoco_preset

BUDGET = 300_000
TARGET = 950  # gymnasium's reward_threshold for InvertedPendulum-v5
# The final last-100 window also holds the episodes flushed while the workers pause after the
# stop, so it may sit a little under TARGET (measured: 922-977 in 7 runs).
FINAL_MIN = 850

pytestmark = pytest.mark.skipif(
    find_spec("mujoco") is None,
    reason="needs the mujoco extra: pip install 'sampleforge[mujoco]'",
)


@pytest.mark.slow
@pytest.mark.benchmark  # out of the CI suite: see the module docstring
@pytest.mark.timeout(240)
def test_the_continuous_family_solves_inverted_pendulum(tmp_path):
    cfg = make_config(
        env="InvertedPendulum-v5",
        train_dir=str(tmp_path),
        train_for_env_steps=BUDGET,
        stop_at_mean_return=TARGET,
        seed=1,
        device="cpu",
        report_every_sec=30,
    )
    assert config_sources(cfg)["num_epochs"] == "family"
    assert cfg.num_epochs == mujoco_preset()["num_epochs"] and cfg.normalize_returns
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_mean_return >= TARGET  # the full window that stopped the run
    assert summary.mean_return_last_100 >= FINAL_MIN
    assert summary.env_steps <= BUDGET
