"""Ctrl-C or SIGTERM in the middle of training: every process gone within 10 s, nothing left in
/dev/shm, a final checkpoint written, exit code 130 (SIGINT) or 143 (SIGTERM)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _children(pid: int) -> set[int]:
    """Every descendant of `pid`, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _rows(csv: Path) -> int:
    return len(csv.read_text().splitlines()) - 1 if csv.exists() else 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum,exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_everything_cleanly(tmp_path, signum, exit_code):
    shm_before = set(os.listdir("/dev/shm"))
    cmd = [sys.executable, "-m", "sampleforge.cli.main", "train", "--env", "CartPole-v1",
           "--train_dir", str(tmp_path), "--experiment", "sigint", "--device", "cpu",
           "--stop_at_mean_return", "inf", "--train_for_env_steps", "100000000",
           "--report_every_sec", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = tmp_path / "sigint" / "progress.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _rows(progress) < 2:  # training under way
        time.sleep(0.2)
    children = _children(proc.pid)
    assert len(children) >= 4, "components did not start"  # learner, inference, 2 workers
    time.sleep(1)
    proc.send_signal(signum)
    t0 = time.monotonic()
    out, _ = proc.communicate(timeout=30)
    # Helpers such as multiprocessing's resource tracker exit when they see the runner go.
    while [p for p in children if _alive(p)] and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"took {elapsed:.1f} s to stop\n{out}"
    assert proc.returncode == exit_code, out
    assert not [p for p in children if _alive(p)], "child processes left behind"
    assert set(os.listdir("/dev/shm")) - shm_before == set()
    assert "interrupted" in out
    assert list((tmp_path / "sigint" / "checkpoints" / "p0").glob("checkpoint_*.pt"))
