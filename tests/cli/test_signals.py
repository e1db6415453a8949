"""Ctrl-C and SIGTERM stop `enjoy`, `eval` and `bench` within seconds, leaving nothing behind.

Each command runs as a subprocess in a session of its own, with a private TMPDIR, and is
signalled once it is working: Ctrl-C as a terminal sends it (SIGINT to the whole process group,
pool workers included), SIGTERM to the command's process alone. Before the fix `enjoy` played
on, and `eval` and `bench` (in pure simulation) hung for ever: their pool workers died of the
Ctrl-C, the pool replaced them, and the lost chunks never finished.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sampleforge.testing.processes import descendants, gone_within, is_alive

pytestmark = [pytest.mark.timeout(120), pytest.mark.exclusive]  # wall-clock bounds

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
SECONDS_TO_STOP = 5.0


def _policy_flags(experiment: Path) -> list[str]:
    return ["--train_dir", str(experiment.parent), "--experiment", experiment.name]


def _start(args: list[str], tmpdir: Path) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "sampleforge.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )


def _wait_for(proc: subprocess.Popen, done, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not done():
        assert proc.poll() is None, f"exited early ({proc.returncode}): {proc.stdout.read()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def _read_until(proc: subprocess.Popen, text: str) -> str:
    """Read its output line by line until a line holds `text` (it blocks: the test's timeout
    bounds it)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"exited ({proc.wait()}) before {text!r}: {''.join(seen)}")


def _workers(proc: subprocess.Popen, count: int) -> None:
    """Until `count` pool workers run (the resource tracker is a child too) and have started
    playing or stepping: busy on the CPU."""

    def busy() -> int:
        ticks = 0
        for pid in descendants(proc.pid):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(stat[11]) > 100  # over 1 s of CPU: importing, or working
            except (OSError, IndexError):
                continue
        return ticks

    _wait_for(proc, lambda: busy() >= count, f"{count} busy workers")


def _stop(proc: subprocess.Popen, signum: int, to_group: bool) -> tuple[float, str]:
    children = descendants(proc.pid)
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("still running 15 s after the signal")
    elapsed = time.monotonic() - t0
    assert gone_within(children, SECONDS_TO_STOP), "child processes left behind"
    return elapsed, out


def _check(proc, signum, elapsed, out, tmpdir) -> None:
    assert proc.returncode == EXIT_CODES[signum], out
    assert elapsed < SECONDS_TO_STOP, f"took {elapsed:.1f} s\n{out}"
    assert "interrupted" in out, out
    assert not list(tmpdir.glob("sampleforge_bench_*")), "the bench's experiment left behind"
    assert not list(tmpdir.glob("pymp-*")), "multiprocessing's temporary folder left behind"


@pytest.fixture
def private_tmp(short_tmpdir):
    """A TMPDIR of the command's own; whatever it left running is killed at the end."""
    tmpdir = short_tmpdir
    started: list[subprocess.Popen] = []
    yield tmpdir, started
    for proc in started:
        left = descendants(proc.pid) | ({proc.pid} if is_alive(proc.pid) else set())
        # Not the resource tracker: it outlives the others to unlink their semaphores.
        trackers = {pid for pid in left if "resource_tracker" in _cmdline(pid)}
        for pid in left - trackers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        gone_within(trackers, 10.0)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


# One signal per command keeps them short (a few seconds each, most of it Python importing
# torch); both signals take the same path (`cli/signals.py`). Ctrl-C is the one that hung the
# pools; the runner's own handling of both is tested in tests/integration/test_shutdown.py and
# the benchmark's reaction to it in tests/unit/bench/test_measure_interrupted.py.


def test_enjoy_stops_on_sigterm(experiment, private_tmp):
    tmpdir, started = private_tmp
    args = ["enjoy", *_policy_flags(experiment), "--max_num_episodes", "100000"]
    proc = _start(args, tmpdir)
    started.append(proc)
    _read_until(proc, "episode 1:")  # playing
    elapsed, out = _stop(proc, signal.SIGTERM, to_group=False)
    _check(proc, signal.SIGTERM, elapsed, out, tmpdir)


def test_eval_stops_on_ctrl_c(experiment, private_tmp):
    tmpdir, started = private_tmp
    args = ["eval", *_policy_flags(experiment), "--eval_episodes", "100000"]
    proc = _start([*args, "--num_processes", "2"], tmpdir)
    started.append(proc)
    _workers(proc, 2)
    elapsed, out = _stop(proc, signal.SIGINT, to_group=True)
    _check(proc, signal.SIGINT, elapsed, out, tmpdir)


def test_bench_stops_on_ctrl_c_in_pure_simulation(private_tmp):
    tmpdir, started = private_tmp
    args = ["bench", "--env", "CartPole-v1", "--device", "cpu", "--num_workers", "1"]
    args += ["--num_envs_per_worker", "8", "--cores", "2", "--duration", "60"]
    proc = _start(args, tmpdir)  # pure simulation lasts min(10 s, duration)
    started.append(proc)
    _read_until(proc, "measuring pure simulation")
    _workers(proc, 2)
    assert list(tmpdir.glob("sampleforge_bench_*")), "the bench's experiment is elsewhere"
    elapsed, out = _stop(proc, signal.SIGINT, to_group=True)
    _check(proc, signal.SIGINT, elapsed, out, tmpdir)
