"""`worker_cpu_affinity`, end to end: each rollout worker process runs pinned to its own core,
a replacement of a killed worker on the same core, while the learner and the inference worker
float over every core the runner may use; without the setting nothing is pinned.

The affinities are read from outside (`os.sched_getaffinity(pid)`) on the live processes of a
short CartPole run.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.testing.ci import unavailable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux affinity")


def _cfg(tmp_path, **overrides):
    return make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        device="cpu",
        num_workers=2,
        num_envs_per_worker=4,
        rollout=16,
        batch_size=64,
        seed=3,
        serial_mode=False,
        stop_at_mean_return=float("inf"),
        tensorboard=False,
        train_for_env_steps=100_000_000,
        **overrides,
    )


def _affinities(runner: Runner) -> dict[str, set[int]]:
    return {name: os.sched_getaffinity(pid) for name, pid in runner.host.pids().items()}


@pytest.fixture
def cores() -> list[int]:
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        unavailable("needs 2 usable cores to tell a pinned worker from a floating one")
    return usable


def _replaced_and_pinned(runner: Runner, name: str, old_pid: int, core: int) -> bool:
    pid = runner.host.pids()[name]
    return pid != old_pid and os.sched_getaffinity(pid) == {core}


def test_each_rollout_worker_and_its_replacement_run_on_their_core(tmp_path, cores):
    with Runner(_cfg(tmp_path, worker_cpu_affinity=True)) as runner:
        runner.start()
        runner.train(until_env_steps=1_000)
        affinities = _affinities(runner)
        assert affinities["rollout_worker_0"] == {cores[0]}
        assert affinities["rollout_worker_1"] == {cores[1]}
        assert affinities["learner_p0"] == affinities["inference_worker_p0_0"] == set(cores)

        # A killed worker's replacement (the supervisor's, after its quarantine) gets its core.
        old_pid = runner.host.pids()["rollout_worker_1"]
        os.kill(old_pid, signal.SIGKILL)
        runner.train(
            seconds=30,
            callback=lambda _: (
                not _replaced_and_pinned(runner, "rollout_worker_1", old_pid, cores[1])
            ),
        )
        assert runner.supervisor.restarts["rollout_worker"] == 1
        assert _replaced_and_pinned(runner, "rollout_worker_1", old_pid, cores[1])
        assert _affinities(runner)["rollout_worker_0"] == {cores[0]}


def test_without_the_setting_rollout_workers_float(tmp_path, cores):
    with Runner(_cfg(tmp_path)) as runner:
        runner.start()
        runner.train(until_env_steps=1_000)
        assert set(map(frozenset, _affinities(runner).values())) == {frozenset(cores)}
