"""Environments that fail: an env that raises, hangs, cannot be built or returns non-finite data.

Each test uses `sampleforge.testing.FaultyEnv` (importable by the spawned rollout workers) and
checks that the fault really fired (its once-marker file, the runner's fault counter, the error
text), not merely that the run survived. Timings are measured against the wall time recorded in
the marker file by the process in which the fault fired.
"""

from __future__ import annotations

import logging
import math
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.cli.main import main
from sampleforge.components.runner import Runner, TrainingError
from sampleforge.config import make_config
from sampleforge.testing import read_marker, register_faulty_env

# The runner's progress (telemetry/run_progress.py) logs each env fault a worker reported.
RUNNER_LOG = "sampleforge.telemetry.run_progress"


def _cfg(tmp_path, env: str, **overrides):
    settings = dict(
        env=env,
        train_dir=str(tmp_path),
        device="cpu",
        num_workers=2,
        num_envs_per_worker=4,
        rollout=16,
        batch_size=64,
        seed=7,
        stop_at_mean_return=float("inf"),
        report_every_sec=1,
        tensorboard=False,
        train_for_env_steps=3_000,
    )
    settings.update(overrides)
    return make_config(**settings)


def _wait_for(condition, timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def _fault_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == RUNNER_LOG
        and r.levelno == logging.WARNING
        and r.getMessage().endswith("(restarted)")
    ]


@pytest.mark.timeout(120)
def test_env_raising_once_is_restarted_logged_and_counted(tmp_path, caplog):
    marker = tmp_path / "raised.marker"
    env = register_faulty_env(
        "faulty_raise_once", fault="raise_in_step", once_marker=str(marker), after_steps=40
    )
    caplog.set_level(logging.WARNING, logger=RUNNER_LOG)
    with Runner(_cfg(tmp_path, env, train_for_env_steps=4_000)) as runner:
        summary = runner.train()
        faults = runner.progress.env_faults
    fired = read_marker(marker)
    assert fired is not None, "the env never raised"
    assert summary.stopped_because == "train_for_env_steps" and summary.env_steps >= 4_000
    assert faults == 1
    where = f"worker {fired['worker']} (env {fired['env']})"
    logged = _fault_warnings(caplog)
    assert len(logged) == 1, logged
    assert where in logged[0] and "InjectedFault: injected fault: step raised" in logged[0]
    assert f"'{env}'" in logged[0]


@pytest.mark.timeout(120)
def test_env_raising_with_fail_policy_fails_the_run_with_its_error(tmp_path):
    marker = tmp_path / "raised.marker"
    env = register_faulty_env(
        "faulty_raise_fail", fault="raise_in_step", once_marker=str(marker), after_steps=40
    )
    cfg = _cfg(tmp_path, env, env_error_policy="fail", train_for_env_steps=100_000_000)
    with Runner(cfg) as runner:
        runner.start()
        with pytest.raises(TrainingError) as failure:
            runner.train(seconds=60)  # bounded: returning normally fails the test
        failed_at = time.time()
    fired = read_marker(marker)
    assert fired is not None, "the env never raised"
    latency = failed_at - fired["time"]
    print(f"env fault -> TrainingError in {latency:.2f} s")
    assert latency < 10
    message = str(failure.value)
    assert f"rollout_worker_{fired['worker']} failed" in message
    assert f"worker {fired['worker']} (env {fired['env']})" in message
    assert f"injected fault: step raised in worker {fired['worker']}" in message  # the original


CLI_SCRIPT = """\
import sys

from sampleforge.cli.main import main
from sampleforge.testing import register_faulty_env

if __name__ == "__main__":
    register_faulty_env("faulty_raise_cli", fault="raise_in_step", once_marker={marker!r},
                        after_steps=40)
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
def test_env_raising_with_fail_policy_fails_the_cli_with_exit_code_1(tmp_path):
    """`sampleforge train` itself (its `main`), with the faulty env registered first: a test
    module cannot be imported by the CLI, but `sampleforge.testing` can."""
    marker = tmp_path / "raised.marker"
    script = tmp_path / "train_faulty.py"
    script.write_text(CLI_SCRIPT.format(marker=str(marker)))
    cmd = [
        sys.executable,
        str(script),
        "train",
        "--env",
        "faulty_raise_cli",
        "--env_error_policy",
        "fail",
        "--train_dir",
        str(tmp_path),
        "--device",
        "cpu",
        "--num_workers",
        "1",
        "--num_envs_per_worker",
        "4",
        "--rollout",
        "16",
        "--batch_size",
        "64",
        "--stop_at_mean_return",
        "inf",
        "--tensorboard",
        "false",
        "--train_for_env_steps",
        "100000000",
        "--train_for_seconds",
        "60",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    exited_at = time.time()
    fired = read_marker(marker)
    assert fired is not None, f"the env never raised\n{proc.stderr[-3000:]}"
    print(f"env fault -> CLI exit in {exited_at - fired['time']:.2f} s")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "training failed: rollout_worker_0 failed" in proc.stderr
    assert "injected fault: step raised in worker 0" in proc.stderr
    assert exited_at - fired["time"] < 10 + 10  # detection, then a bounded shutdown


@pytest.mark.timeout(120)
def test_env_that_cannot_be_built_in_workers_fails_with_a_clear_error(tmp_path):
    env = register_faulty_env("faulty_broken_init", fault="raise_in_init_in_workers")
    runner = Runner(_cfg(tmp_path, env))  # the runner's own process builds it fine
    with runner:
        t0 = time.monotonic()
        with pytest.raises(TrainingError) as failure:
            runner.train()
        elapsed = time.monotonic() - t0
    print(f"construction failure -> TrainingError in {elapsed:.2f} s (including start)")
    assert elapsed < 30
    message = str(failure.value)
    assert f"env '{env}' could not be created in worker" in message
    assert "injected fault: construction of FaultyEnv failed" in message


@pytest.mark.timeout(150)
def test_env_hanging_in_step_gets_its_worker_replaced(tmp_path):
    marker = tmp_path / "hung.marker"
    env = register_faulty_env(
        "faulty_hang",
        fault="hang_in_step",
        once_marker=str(marker),
        after_steps=40,
        hang_seconds=1000,
    )
    timeout = 3.0
    cfg = _cfg(tmp_path, env, env_step_timeout_sec=timeout, train_for_env_steps=100_000_000)
    seen: dict = {}
    errors: list[BaseException] = []
    recovered = threading.Event()
    abandon = threading.Event()

    def watch(runner: Runner) -> None:
        try:
            assert _wait_for(lambda: marker.exists() or abandon.is_set(), 60), "never hung"
            fired = read_marker(marker)
            seen["fired"] = fired
            name = f"rollout_worker_{fired['worker']}"
            assert runner.host.pids()[name] == fired["pid"]
            assert _wait_for(
                lambda: runner.supervisor.restarts["rollout_worker"] >= 1 or abandon.is_set(),
                timeout + 30,
            ), "hang never detected"
            seen["detected"] = time.time() - fired["time"]
            assert _wait_for(
                lambda: runner.host.pids()[name] != fired["pid"] or abandon.is_set(), 30
            ), "no replacement started"
            # The replacement works: it polls (heartbeat) and its envs step again.
            ledger = runner.wiring.ledger
            beat_after = time.time()
            assert _wait_for(
                lambda: float(ledger.heartbeats[fired["worker"]]) > beat_after or abandon.is_set(),
                60,
            ), "the replacement never ran"
            frames = runner.progress.frames_collected
            assert _wait_for(
                lambda: runner.progress.frames_collected > frames or abandon.is_set(), 30
            )
            seen["replacement_pid"] = runner.host.pids()[name]
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)
        finally:
            recovered.set()

    with Runner(cfg) as runner:
        runner.start()
        watcher = threading.Thread(target=watch, args=(runner,), daemon=True)
        watcher.start()
        try:
            first = runner.train(seconds=90, callback=lambda status: not recovered.is_set())
        finally:
            abandon.set()
            watcher.join(10)
        if errors:
            raise errors[0]
        assert first.stopped_because == "callback", "the run did not survive the hang"
        target = runner.progress.total_env_steps + 2_000
        second = runner.train(until_env_steps=target)
        restarts = dict(runner.supervisor.restarts)
    fired = seen["fired"]
    print(
        f"hung at step {fired['step']} of worker {fired['worker']} env {fired['env']}; "
        f"worker killed and noticed {seen['detected']:.2f} s after the hang began"
    )
    assert seen["detected"] <= timeout + 5
    assert restarts == {"rollout_worker": 1, "inference_worker": 0}
    assert seen["replacement_pid"] != fired["pid"]
    assert second.stopped_because == "train_for_env_steps" and second.env_steps >= target


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "fault,what", [("nan_obs", "non-finite observation"), ("inf_reward", "non-finite reward")]
)
def test_non_finite_env_data_never_reaches_the_learner(tmp_path, caplog, fault, what):
    env = register_faulty_env(f"faulty_{fault}", fault=fault, after_steps=5, every=29)
    caplog.set_level(logging.WARNING, logger=RUNNER_LOG)
    with Runner(_cfg(tmp_path, env, train_for_env_steps=4_000)) as runner:
        summary = runner.train()
        faults = runner.progress.env_faults
        stats = dict(runner.progress.last_stats)
        versions = dict(runner.progress.policy_version)
    assert summary.env_steps >= 4_000
    # ~1 fault per env per 29 steps: well over 100 in 4000 steps of 8 envs
    assert faults > 20, faults
    logged = _fault_warnings(caplog)
    assert logged and all(what in line for line in logged), logged[:3]
    assert versions[0] > 0, "no SGD step happened"
    assert stats.get("health/skipped_updates", 0) == 0, stats
    assert stats.get("health/non_finite_updates", 0) == 0, stats
    for key in ("losses/total", "losses/policy", "losses/value", "losses/entropy"):
        assert key in stats and math.isfinite(stats[key]), (key, stats)


# --- an env that faults at every step; envs broken from the start ------------------------------

ALWAYS_RAISING_SCRIPT = """\
import sys

from sampleforge.cli.main import main
from sampleforge.testing import register_faulty_env

if __name__ == "__main__":
    register_faulty_env("faulty_always_raises", fault="raise_in_step", every=1)
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
def test_env_raising_at_every_step_stops_the_cli_run_with_one_line_and_few_log_lines(tmp_path):
    """The default policy (restart) with the default bound: no endless restarts, no flood."""
    script = tmp_path / "train_always_raising.py"
    script.write_text(ALWAYS_RAISING_SCRIPT)
    cmd = [sys.executable, str(script), "train", "--env", "faulty_always_raises"]
    cmd += ["--train_dir", str(tmp_path), "--device", "cpu", "--num_workers", "1"]
    cmd += ["--num_envs_per_worker", "4", "--rollout", "16", "--batch_size", "64"]
    cmd += ["--stop_at_mean_return", "inf", "--tensorboard", "false"]
    # Without the bound the run would train on nothing until this ends it, with exit 0.
    cmd += ["--train_for_env_steps", "100000000", "--train_for_seconds", "60"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    elapsed = time.monotonic() - t0
    lines = proc.stderr.splitlines()
    print(f"exit {proc.returncode} after {elapsed:.1f} s, {len(lines)} lines on stderr")
    assert proc.returncode == 1, proc.stderr[-3000:]  # train_for_seconds would exit with 0
    (error,) = [line for line in lines if line.startswith("sampleforge: training failed")]
    assert "env 'faulty_always_raises' failed 100 times in a row in worker 0 (env " in error
    assert "InjectedFault: injected fault: step raised in worker 0" in error
    assert "max_consecutive_env_faults=100" in error
    assert "Traceback" not in proc.stderr  # the line says it all (runner.SELF_EXPLAINED_ERRORS)
    # The worker failed the run: the supervisor did not replace it with one that would fail too.
    assert "replacing it" not in proc.stderr
    # Rate-limited warnings: 5 from the worker, at most 5 from the runner, and the error, rather
    # than one per fault (about 400 here).
    faults = [line for line in lines if "step raised" in line]
    assert len(faults) <= 15, "\n".join(faults)
    assert len(lines) < 100, proc.stderr[-3000:]


def _train(tmp_path, env: str) -> list[str]:
    return ["train", "--env", env, "--train_dir", str(tmp_path), "--device", "cpu"]


@pytest.fixture
def cli_signal_handlers():
    """`main` records SIGINT and SIGTERM; give pytest its own handlers back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


class NoRenderMode(gym.Env):
    """A user's Gymnasium env class whose constructor takes no `render_mode` argument."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        super().__init__()


def test_env_whose_constructor_raises_in_the_runner_is_one_line_and_exit_2(
    tmp_path, capsys, cli_signal_handlers
):
    gym.register("NoRenderMode-v0", entry_point=NoRenderMode)
    try:
        code = main(_train(tmp_path, "NoRenderMode-v0"))
    finally:
        gym.registry.pop("NoRenderMode-v0")
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("sampleforge: env 'NoRenderMode-v0' could not be created: TypeError: ")
    assert "unexpected keyword argument 'render_mode'" in err


def test_env_whose_observations_do_not_fit_its_space_is_one_line_and_exit_2(
    tmp_path, capsys, cli_signal_handlers
):
    env = register_faulty_env("faulty_wrong_obs_shape", fault="wrong_obs_shape")
    code = main(_train(tmp_path, env))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == (
        "sampleforge: env 'faulty_wrong_obs_shape' returned an observation of shape (5,), but "
        "its observation space declares (4,) (at its first reset)\n"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
