"""One run per experiment, with real processes (checkpoint/experiment_lock.py; issue 40).

A CartPole run trains; the same `sampleforge train` in a second terminal is refused with exit
code 2 and a one-line error naming the first run's pid, and so is `--restart_behavior
overwrite`, which deletes nothing; the first run keeps training. Once the first runner is
SIGKILLed its lock is free at once, while its children are still exiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sampleforge import APPO
from sampleforge.components.runner import Runner
from sampleforge.config import ConfigError, make_config
from sampleforge.testing.processes import descendants, is_alive


def _train(train_dir: Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sampleforge.cli.main",
        "train",
        "--env",
        "CartPole-v1",
        "--train_dir",
        str(train_dir),
        "--device",
        "cpu",
        "--num_workers",
        "1",
        "--stop_at_mean_return",
        "inf",
        "--report_every_sec",
        "1",
        "--save_every_sec",
        "1",
        *flags,
    ]


def _rows(csv: Path) -> int:
    return len(csv.read_text().splitlines()) - 1 if csv.exists() else 0


def _wait_rows(proc: subprocess.Popen, csv: Path, rows: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _rows(csv) < rows:
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    assert _rows(csv) >= rows, "the first run does not train"


def _second_runs(train_dir: Path) -> list[subprocess.CompletedProcess]:
    """The same command, and the same with overwrite, started together (each is a new
    interpreter that imports torch: seconds on a busy machine)."""
    flags = [(), ("--restart_behavior", "overwrite")]
    procs = [
        subprocess.Popen(
            _train(train_dir, "--train_for_env_steps", "1000", *more),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for more in flags
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


@pytest.mark.timeout(300)
def test_a_second_run_is_refused_while_the_first_trains_and_free_once_it_is_killed(
    tmp_path, short_tmpdir
):
    exp = tmp_path / "CartPole-v1"  # the default experiment name: the env's
    first = subprocess.Popen(  # a session, so a process group, of its own
        _train(tmp_path, "--train_for_env_steps", "100000000"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # Its own TMPDIR: killed, it cannot remove multiprocessing's socket folder there.
        env={**os.environ, "TMPDIR": str(short_tmpdir)},
    )
    children: set[int] = set()
    try:
        _wait_rows(first, exp / "progress.csv", 1)
        config = (exp / "config.json").read_bytes()
        for second in _second_runs(tmp_path):
            assert second.returncode == 2, second.stderr
            errors = [line for line in second.stderr.splitlines() if "sampleforge:" in line]
            assert len(errors) == 1, second.stderr
            assert f"is in use by another run (pid {first.pid};" in errors[0]
            assert "train --env CartPole-v1 --train_dir" in errors[0]  # the holder's command
        # Nothing deleted or rewritten (overwrite included), and the first run goes on.
        assert (exp / "config.json").read_bytes() == config
        assert first.poll() is None
        rows = _rows(exp / "progress.csv")
        _wait_rows(first, exp / "progress.csv", rows + 1)  # the first run keeps training
        assert any((exp / "checkpoints" / "p0").glob("checkpoint_*.pt"))  # still written

        children = descendants(first.pid)
        first.kill()  # SIGKILL: no chance to unlock
        first.wait(10)
        assert any(is_alive(pid) for pid in children)  # they take a moment to follow
        cfg = make_config(env="CartPole-v1", train_dir=str(tmp_path), device="cpu", num_workers=1)
        with Runner(cfg) as runner:  # locks and prepares the experiment: not blocked
            assert runner.resume is True
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
        first.stdout.close()
        deadline = time.monotonic() + 10
        while any(is_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(is_alive(pid) for pid in children)


def test_the_python_api_and_the_runner_hold_the_lock_until_they_close(tmp_path):
    # No process starts: the lock is taken when the object is made, released by close.
    settings = dict(train_dir=str(tmp_path), experiment="api", device="cpu", num_workers=1)
    model = APPO("CartPole-v1", **settings)
    cfg = make_config(env="CartPole-v1", **settings)
    with pytest.raises(ConfigError, match=f"in use by this process \\(pid {os.getpid()};"):
        Runner(cfg)
    model.close()
    with Runner(cfg):
        with pytest.raises(ConfigError, match="in use by this process"):
            APPO("CartPole-v1", **settings)
    Runner(cfg).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["api"]  # no lock file left
