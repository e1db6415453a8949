"""Stopping a training run from outside, the ways users and machines do it.

- Ctrl-C or SIGTERM in the middle of training (SIGTERM to the runner, to its whole process
  group, or to every process of the run, as `systemctl stop` or a scheduler sends it): every
  process gone within 10 s, nothing new in /dev/shm, a final checkpoint written,
  exit code 130 (SIGINT) or 143 (SIGTERM); the counters of a resumed run continue exactly from
  it.
- SIGINT at random moments, start-up included: the same, and the previous checkpoint intact.
- A second Ctrl-C: hard exit within 2 s, no orphans, no multiprocessing folder in the temp dir.
- SIGKILL of the runner: its children exit within 5 s; the next start of the same experiment
  resumes from the last checkpoint.
"""

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sampleforge.checkpoint import CheckpointStore, checkpoint_info
from sampleforge.components.learner_worker import STAGER_KEY
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.testing.processes import descendants, is_alive

pytestmark = pytest.mark.exclusive  # wall-clock bounds on shutdown, and /dev/shm checked as a whole


def _rows(csv: Path) -> int:
    return len(csv.read_text().splitlines()) - 1 if csv.exists() else 0


def _start(
    train_dir: Path,
    experiment: str,
    device: str = "cpu",
    env_steps: int = 100_000_000,
    tmpdir: Path | None = None,
    settings: dict[str, str] | None = None,
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "sampleforge.cli.main",
        "train",
        "--env",
        "CartPole-v1",
        "--train_dir",
        str(train_dir),
        "--experiment",
        experiment,
        "--device",
        device,
        "--stop_at_mean_return",
        "inf",
        "--train_for_env_steps",
        str(env_steps),
        "--report_every_sec",
        "1",
        "--save_every_sec",
        "2",
    ]
    for name, value in (settings or {}).items():
        cmd += [f"--{name}", value]
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen(  # a session, so a process group, of its own
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


def _session(session: int) -> dict[int, str]:
    """{pid: command line} of every live process of `session` (what `pkill -s` signals)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            pid = int(entry.name) if entry.name.isdigit() else 0
            if pid and os.getsid(pid) == session and is_alive(pid):
                found[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # gone meanwhile
    return {pid: cmdline.decode(errors="replace") for pid, cmdline in found.items()}


def _sigterm_every_process_of_the_run(runner: int) -> list[str]:
    """SIGTERM to every process of the runner's session and below the runner (the group guard
    has a session of its own), as `systemctl stop` signals a service's control group; returns
    the command lines signalled."""
    targets = _session(runner)
    for pid in descendants(runner):
        with contextlib.suppress(OSError):
            targets.setdefault(pid, Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return list(targets.values())


def _wait_training(proc: subprocess.Popen, progress: Path, rows: int = 1) -> set[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _rows(progress) < rows:
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    assert _rows(progress) >= rows, "training did not start"
    return descendants(proc.pid)


def _wait_gone(pids: set[int], since: float, limit: float) -> float:
    while [p for p in pids if is_alive(p)] and time.monotonic() - since < limit:
        time.sleep(0.05)
    return time.monotonic() - since


def _latest(checkpoints: Path) -> tuple[int, int] | None:
    loaded = CheckpointStore(checkpoints).load_latest()  # raises if every checkpoint is bad
    return None if loaded is None else checkpoint_info(loaded[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "signum,exit_code,target,algorithm",
    # SIGTERM to the runner alone is the group case from the runner's side: the fork server
    # and every component lead groups of their own, so only the runner is in its group.
    [
        (signal.SIGINT, 130, "runner", "appo"),
        (signal.SIGTERM, 143, "group", "appo"),
        (signal.SIGTERM, 143, "every_process", "appo"),
        (signal.SIGTERM, 143, "every_process", "dqn"),
    ],
    ids=[
        "sigint",
        "sigterm_to_the_process_group",
        "sigterm_to_every_process_of_the_session",
        "dqn_with_its_replay_sigterm_to_every_process",
    ],
)
def test_signal_stops_everything_cleanly_and_resume_continues_exactly(
    tmp_path, signum, exit_code, target, algorithm
):
    # A value-based run's learner also holds the replay and its sampler thread; the final
    # checkpoint must carry the replay (--save_replay) for the resume to continue with it.
    settings = {"algorithm": algorithm}
    if algorithm == "dqn":
        settings.update(save_replay="true", learning_starts="200", samples_per_insert="4")
    shm_before = set(os.listdir("/dev/shm"))
    proc = _start(tmp_path, "sig", settings=settings)
    children = _wait_training(proc, tmp_path / "sig" / "progress.csv", rows=2)
    assert len(children) >= 4, "components did not start"  # learner, inference, 2 workers
    checkpoints = tmp_path / "sig" / "checkpoints" / "p0"
    periodic_before = {p.name: checkpoint_info(p) for p in checkpoints.glob("checkpoint_*.pt")}
    # To the group: as `kill -TERM -- -PGID` would; to every process: as `systemctl stop`,
    # `scancel` or `pkill -TERM -s SID` would. Only the runner may act on it; a fork server,
    # learner or group guard killed by it would lose the final checkpoint or the clean-up.
    if target == "group":
        os.killpg(proc.pid, signum)
    elif target == "every_process":
        signalled = _sigterm_every_process_of_the_run(proc.pid)
        for part in ("forkserver", "resource_tracker", "group_guard"):  # the fault fired
            assert any(part in cmdline for cmdline in signalled), (part, signalled)
        assert len(signalled) >= 8, signalled  # and runner + learner, inference, 2 workers
    else:
        proc.send_signal(signum)
    t0 = time.monotonic()
    out, _ = proc.communicate(timeout=30)
    elapsed = _wait_gone(children, t0, 10)  # helpers like the resource tracker follow the runner
    assert not _session(proc.pid), "processes of the run left behind"
    assert elapsed < 10, f"took {elapsed:.1f} s to stop\n{out}"
    assert proc.returncode == exit_code, out
    assert not [p for p in children if is_alive(p)], "child processes left behind"
    assert set(os.listdir("/dev/shm")) - shm_before == set()
    assert "interrupted" in out
    version, env_steps = _latest(checkpoints)
    assert version > 0 and env_steps > 0
    # The signal wrote a final checkpoint (a periodic one, every 2 s, would not be announced so),
    # and it is the newest: no periodic checkpoint written before the signal is later.
    final = re.search(r"final checkpoint of policy 0: (\S+)", out)
    assert final, out
    assert checkpoint_info(Path(final.group(1))) == (version, env_steps)
    assert all(steps <= env_steps for _, steps in periodic_before.values()), periodic_before
    if algorithm == "dqn":
        state, _ = CheckpointStore(checkpoints).load_latest()
        assert state[STAGER_KEY]["replay"], "the final checkpoint lost the replay"

    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment="sig",
        device="cpu",
        stop_at_mean_return=float("inf"),
        **settings,
    )
    with Runner(cfg) as resumed:
        resumed.start()
        assert resumed.progress.env_steps[0] == env_steps
        assert resumed.progress.policy_version[0] == version
    # Closing let go of the weights the runner shared (on CUDA torch warns at exit otherwise).
    assert resumed.wiring.weights[0].flat.numel() == 0


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigint_at_random_moments(tmp_path):
    """Three interruptions at random times of the same experiment, start-up included (the
    suite's time allows no more: each costs a start of the whole system; the moment inside
    the CLI's imports has its own test, tests/cli/test_early_signals.py)."""
    rng = random.Random(1234)
    shm_before = set(os.listdir("/dev/shm"))
    checkpoints = tmp_path / "rnd" / "checkpoints" / "p0"
    previous = None
    for attempt in range(3):
        proc = _start(tmp_path, "rnd")
        time.sleep(rng.uniform(0.2, 5.0))
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        elapsed = _wait_gone(children | descendants(proc.pid), t0, 10)
        assert elapsed < 10, f"attempt {attempt}: {elapsed:.1f} s\n{out}"
        assert proc.returncode == 130, f"attempt {attempt}: {proc.returncode}\n{out}"
        latest = _latest(checkpoints)  # a complete new one or the intact previous one
        if previous is not None:
            assert latest is not None and latest >= previous, (attempt, latest, previous)
        previous = latest
    assert set(os.listdir("/dev/shm")) - shm_before == set()


IPC_WARNING = "shared CUDA tensors released"  # torch's "Producer process has been terminated..."


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.timeout(180)
@pytest.mark.parametrize("ending", ["budget", "sigint"])
def test_cuda_run_ends_without_ipc_warning(tmp_path, ending):
    # The runner makes the CUDA weights the learner and inference workers map through IPC:
    # each component lets go of them before it exits, then the runner frees its own at close;
    # torch warns at the runner's exit otherwise. (It warned while the runner kept its own,
    # on an H100 and an H200, 2026-11-26/27; the release at close is not yet run on a GPU.)
    budget = 30_000 if ending == "budget" else 100_000_000
    proc = _start(tmp_path, "cuda", device="cuda", env_steps=budget)
    if ending == "sigint":
        _wait_training(proc, tmp_path / "cuda" / "progress.csv", rows=2)
        proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == (130 if ending == "sigint" else 0), out
    assert IPC_WARNING not in out, out


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", ["at_once", "while_closing"])
def test_second_ctrl_c_exits_at_once(tmp_path, short_tmpdir, when):
    """The second Ctrl-C right after the first (the train call's end), or once the final
    checkpoint is written (the components' stop, the longest part of a clean stop)."""
    tmpdir = short_tmpdir  # the run's own, so that what it leaves there is exactly known
    proc = _start(tmp_path, "twice", tmpdir=tmpdir)
    children = _wait_training(proc, tmp_path / "twice" / "progress.csv")
    assert list(tmpdir.glob("pymp-*/listener-*")), "the fork server's socket is elsewhere"
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    proc.send_signal(signal.SIGINT)
    if when == "at_once":
        time.sleep(0.05)
    else:
        deadline = time.monotonic() + 30
        while not any("final checkpoint" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    proc.wait(timeout=30)
    reader.join(10)
    out = "".join(lines)
    elapsed = _wait_gone(children, t0, 5)
    assert elapsed < 2, f"took {elapsed:.1f} s"
    assert proc.returncode == 130
    # A clean stop (the first Ctrl-C's) takes about 2 s too, so time alone barely tells them
    # apart; only a clean stop reaches the summary.
    assert "stopped because" not in out, out
    assert not list(tmpdir.glob("pymp-*")), "multiprocessing's temporary folder left behind"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_of_the_runner_takes_its_children_along(tmp_path, short_tmpdir):
    shm_before = set(os.listdir("/dev/shm"))
    tmpdir = short_tmpdir  # a runner killed so cannot remove multiprocessing's folder there
    proc = _start(tmp_path, "killed", tmpdir=tmpdir)
    children = _wait_training(proc, tmp_path / "killed" / "progress.csv", rows=3)
    proc.kill()
    t0 = time.monotonic()
    proc.communicate(timeout=30)
    elapsed = _wait_gone(children, t0, 10)
    assert elapsed < 5, f"children outlived the runner by {elapsed:.1f} s"
    assert set(os.listdir("/dev/shm")) - shm_before == set()
    # The next start resumes from the last periodic checkpoint.
    version, env_steps = _latest(tmp_path / "killed" / "checkpoints" / "p0")
    cfg = make_config(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment="killed",
        device="cpu",
        stop_at_mean_return=float("inf"),
    )
    with Runner(cfg) as resumed:
        resumed.start()
        assert resumed.progress.env_steps[0] == env_steps > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_ends_a_benchmark_of_several_seeds_not_just_the_current_one(tmp_path):
    script = Path(__file__).parents[2] / "benchmarks" / "learning_curves.py"
    cmd = [sys.executable, str(script), "--env", "CartPole-v1", "--seeds", "1", "2"]
    cmd += ["--frames", "100000000", "--train_dir", str(tmp_path), "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60  # its first report comes after 30 s: wait for its workers
    while len(descendants(proc.pid)) < 4 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    time.sleep(2.0)  # training
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted in seed 1" in out
    assert not (tmp_path / "CartPole-v1_seed2").exists(), "seed 2 started after Ctrl-C"
