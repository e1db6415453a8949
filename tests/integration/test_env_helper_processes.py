"""Processes an env starts (a simulator binary, ViZDoom's engine) never outlive a run.

A rollout worker killed as hung (or dead of a segfault or the OOM killer) cannot close its envs:
the runner kills their helpers as it replaces the worker. A runner that dies without closing
(SIGKILL) leaves them to its group guard (`comms/group_guard.py`). The helpers here are the
`sleep`s of `FaultyEnv(helper_process_dir=...)`; one env hangs once, in one worker.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sampleforge.testing import read_marker
from sampleforge.testing.processes import gone_within, is_alive

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.exclusive,  # wall-clock bounds on process deaths
]

RUN = """
import sys
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.testing import register_faulty_env

train_dir, helpers, marker = sys.argv[1:]
env = register_faulty_env("with_helpers", helper_process_dir=helpers, fault="hang_in_step",
                          once_marker=marker, after_steps=200, hang_seconds=1000)
cfg = make_config(env=env, train_dir=train_dir, device="cpu", num_workers=2,
                  num_envs_per_worker=2, rollout=16, batch_size=64, tensorboard=False,
                  env_step_timeout_sec=3.0, stop_at_mean_return=float("inf"),
                  train_for_env_steps=100_000_000)
with Runner(cfg) as runner:
    runner.train()
"""


def _helpers(directory: Path) -> dict[int, int]:
    """{helper pid: its worker's pid} of every helper started so far."""
    return {int(f.name): int(f.read_text() or 0) for f in directory.iterdir()}


def _wait_for(condition, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def _alive(pids) -> list[int]:
    return [pid for pid in pids if is_alive(pid)]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_helpers_die_with_a_hung_worker_and_with_a_killed_runner(tmp_path, short_tmpdir):
    helpers_dir, marker = tmp_path / "helpers", tmp_path / "hung.marker"
    helpers_dir.mkdir()
    log = (tmp_path / "run.log").open("w")  # a file: a full pipe would stall the run
    runner = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path / "train_dir"), str(helpers_dir), str(marker)],
        stdout=log,
        stderr=subprocess.STDOUT,
        # Its own TMPDIR: killed, it cannot remove multiprocessing's socket folder there.
        env={**os.environ, "TMPDIR": str(short_tmpdir)},
    )
    try:
        assert _wait_for(marker.exists, 90), f"no env hung\n{_log(tmp_path)}"
        hung = read_marker(marker)["pid"]
        theirs = [helper for helper, owner in _helpers(helpers_dir).items() if owner == hung]
        assert len(theirs) == 2 and _alive(theirs) == theirs
        # Killed as hung after 3 s and replaced: the replacement starts helpers of its own.
        assert _wait_for(lambda: len(_helpers(helpers_dir)) == 6, 60), "no replacement"
        assert gone_within(theirs, 5.0), "a killed worker's helpers live on"
        assert runner.poll() is None, _log(tmp_path)
        live = _alive(_helpers(helpers_dir))
        assert len(live) == 4

        runner.kill()
        runner.wait()
        assert gone_within(live, 5.0), "helpers outlived the killed runner"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        log.close()
        for pid in _alive(_helpers(helpers_dir)):
            os.kill(pid, signal.SIGKILL)


def _log(tmp_path: Path) -> str:
    return (tmp_path / "run.log").read_text()[-3000:]
