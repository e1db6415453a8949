"""InvertedPendulum-v5 reaches a mean return of 900 (last 100 episodes) within 300k agent steps.

The unchanged ``mujoco_preset()`` (PPO with GAE, 10 epochs over 2048-sample datasets, separate
64x64 tanh MLPs, normalised observations), run asynchronously with the default two rollout
workers of 16 envs each. The return is 1 per step the pole stays up, at most 1000.

Measured on a 2-core CPU machine, budget 300k (the linear learning-rate decay is tied to it):
seed 1 solved at 168k agent steps, seed 2 at 172k (wall 86 s and 62 s at load average ~9,
i.e. the cores shared with other jobs; 15-20 s on an idle machine). Seeds 1-5 with a 500k
budget solved at 176k-195k steps. The budget leaves ~1.5x headroom over the slowest seed. The
test itself (seed 1) took 32 s at load average ~5.
"""

from importlib.util import find_spec

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.envs.mujoco import mujoco_preset

BUDGET = 300_000
TARGET = 900
# The final last-100 window also holds the episodes flushed while the workers pause after the
# stop, so it may sit a little under TARGET (measured: 922-977 in 7 runs).
FINAL_MIN = 850

pytestmark = pytest.mark.skipif(
    find_spec("mujoco") is None,
    reason="needs the mujoco extra: pip install 'sampleforge[mujoco]'",
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mujoco_preset_solves_inverted_pendulum(tmp_path):
    preset = {**mujoco_preset(), "train_for_env_steps": BUDGET}
    cfg = make_config(env="InvertedPendulum-v5", train_dir=str(tmp_path),
                      stop_at_mean_return=TARGET, seed=1, device="cpu", report_every_sec=30,
                      **preset)
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_mean_return >= TARGET  # the full window that stopped the run
    assert summary.mean_return_last_100 >= FINAL_MIN
    assert summary.env_steps <= BUDGET
