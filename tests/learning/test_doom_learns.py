"""VizDoom doom_basic: the conv policy's mean return rises from a random policy's -141 to 50.

doom_basic: one monster in front of the agent; -1 per tic, -5 per shot, +106 for the kill, at
most 300 tics (75 agent steps at frameskip 4). A return of about 95 means a kill right away.

Random policy (uniform over NOOP/LEFT/RIGHT/ATTACK, 100 episodes, seeds 0-99): mean -141
(median -90, std 182, min -375, max 95; -175 over the first 50 episodes). The test asks for a
mean over the last 100 episodes of at least 50, ~190 above random and ~10 standard errors of
the random mean.

Settings: nothing but the doom family's (config/families.py): the conv_simple encoder on
3x72x128 RGB with ELU and a GRU core (as in the paper), Table A.5's rollout 32, gamma 0.99, PPO
clip 0.1 (with the dual clip at 3) and gradient clip 4; entropy 0.01; one epoch over
1024-sample datasets in 4 minibatches of 256 at lr 2.5e-4 decaying linearly to 0 at the budget
(the CPU learner is the bottleneck, so more, smaller updates than the paper's one of 2,048).
The linear decay is why the budget is 1M frames (seed 1, 2 cores, 2026-11-26): over a 400k
budget the lr was down to 38% by 250k frames and the return stayed random (-128 at 400k);
constant lr with entropy 0.005 stopped at 356k; over 1M, linear with entropy 0.005 stopped at
389k in 103 s, and the family now (linear, entropy 0.01) passed in 97 s with the config tests.
Return normalisation in place of the earlier hand-picked reward scale of 0.01 (a kill ~1).
With lr 2e-4, tanh, 2 x 512 minibatches, nothing was learnt in 400k frames. With the family
before (constant lr, entropy 0.01) the test (seed 1) took 93 s on 2 cores (2026-11-25).

Earlier figures, with reward scale 0.01 instead of return normalisation, measured on a 2-core
machine shared with other jobs (load average 6-9), env steps in frames (agent steps x 4):
seed 1 stopped at 238k frames (106 s), seed 2 at 246k (113 s), seed 3 at 221k (97 s); the test itself (seed 1) took 120 s. The return stays at the random
level for the first ~120k frames, then climbs steeply. The 400k budget then left ~1.6x headroom;
at the measured ~2.4k frames/s the whole budget would take ~3 minutes.

A benchmark (`pytest -m benchmark tests/learning`), not part of the CI suite since 2026-11-27:
it took 179 s of the suite's 21 minutes on a slow 2-core machine, where the suite must stay
under 15. The family's curves on two harder scenarios (5M and 10M frames) are in docs/benchmarks.md.
"""

from importlib.util import find_spec

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.config.sources import config_sources

BUDGET = 1_000_000  # frames
RANDOM_POLICY_MEAN_RETURN = -141.0
TARGET = 50.0
# The final last-100 window also holds the episodes flushed while the workers pause after the
# stop, so it can sit a little under TARGET (seed 1: stopped at 50.5, final 48.1).
FINAL_MIN = 25.0

pytestmark = pytest.mark.skipif(
    find_spec("vizdoom") is None or find_spec("cv2") is None,
    reason="needs the doom extra: pip install 'sampleforge[doom]'",
)


@pytest.mark.slow
@pytest.mark.benchmark  # out of the CI suite: see the module docstring
@pytest.mark.timeout(330)
def test_conv_policy_learns_doom_basic(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the engine creates ./_vizdoom in its working directory
    # Nothing but the doom family's settings (the defaults' 2 workers, rollout 32).
    cfg = make_config(
        env="doom_basic",
        train_dir=str(tmp_path / "train_dir"),
        train_for_env_steps=BUDGET,
        stop_at_mean_return=TARGET,
        seed=1,
        device="cpu",
        report_every_sec=30,
    )
    assert config_sources(cfg)["activation"] == "family" and cfg.normalize_returns
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.stopped_because == "stop_at_mean_return", summary
    assert summary.best_mean_return >= TARGET  # the full window that stopped the run
    assert summary.mean_return_last_100 >= FINAL_MIN > RANDOM_POLICY_MEAN_RETURN + 150
    assert summary.env_steps <= BUDGET
