"""Data-parallel runs of 2 ranks on this machine (gloo on loopback), as users launch them.

- With 2 policies (two learner groups, no deadlock while they train), a rank SIGKILLed
  mid-run: the other stops within 30 s with a one-line error that says a peer left, and
  leaves no process behind.
- Under `torchrun --max-restarts 1`, with 2 policies, a rank SIGKILLed mid-run: the job
  restarts, resumes from the last checkpoint with its env steps and policy version exact, and
  trains to the end; env steps count every rank's, and rank 0 alone writes (one experiment
  folder, world_size 2 in summary.json, no scratch folder left behind, one final report).
  A benchmark (a minute of two whole systems restarting on 2 cores does not fit CI):
  `pytest -m benchmark tests/integration/test_distributed_runs.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sampleforge.checkpoint import checkpoint_info
from sampleforge.testing.local_ranks import free_port
from sampleforge.testing.processes import descendants, gone_within

pytestmark = pytest.mark.exclusive  # wall-clock bounds, and two whole systems on 2 cores

SMALL = [
    "--env", "CartPole-v1", "--num_workers", "1", "--num_envs_per_worker", "8",
    "--distributed", "true", "--seed", "3", "--report_every_sec", "1",
    "--distributed_timeout_sec", "20",
]  # fmt: skip


@pytest.fixture
def scratch():
    """The ranks' TMPDIR, where ranks > 0 keep their scratch folders: the test sees whether
    they are cleaned up. A short path: multiprocessing puts its socket there (108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="sfdp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(scratch: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", *args]


def _rank_process(scratch: Path, rank: int, port: int, train_dir: Path) -> subprocess.Popen:
    """One rank's `sampleforge train` with the environment torchrun would give it."""
    env = {
        **_env(scratch), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    }  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "sampleforge", "train", *SMALL, "--num_policies", "2",
         "--train_for_env_steps", "10000000", "--train_dir", str(train_dir)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _wait_for_training(
    progress: Path, ranks: list[subprocess.Popen], timeout: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if progress.exists() and len(progress.read_text().splitlines()) >= 3:
            return
        for rank in ranks:
            if rank.poll() is not None:
                raise AssertionError(f"a rank exited early:\n{rank.communicate()[1][-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no training progress in {progress} within {timeout:.0f} s")


def test_a_rank_killed_stops_the_other_within_30_s_with_a_clear_error(tmp_path, scratch):
    train_dir, port = tmp_path / "runs", free_port()
    ranks = [_rank_process(scratch, r, port, train_dir) for r in (0, 1)]
    try:
        _wait_for_training(train_dir / "CartPole-v1" / "progress.csv", ranks)
        survivors = {ranks[0].pid} | descendants(ranks[0].pid)
        ranks[1].kill()
        killed = time.monotonic()
        _, err = ranks[0].communicate(timeout=30)
        took = time.monotonic() - killed
    finally:
        for p in ranks:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert ranks[0].returncode == 1, err[-3000:]
    assert took < 30
    last = err.strip().splitlines()[-1]
    # Either policy's learner may be the first to find its peer gone.
    assert re.search(r"another rank's learner of policy [01] left the run", last), err[-3000:]
    assert gone_within(survivors, 10), "rank 0 left processes behind"


@pytest.mark.benchmark
def test_torchrun_restarts_a_killed_rank_and_the_job_resumes_exactly(tmp_path, scratch):
    train_dir = tmp_path / "runs"
    job = subprocess.Popen(
        _torchrun("--nproc-per-node", "2", "--max-restarts", "1", "-m", "sampleforge", "train",
                  *SMALL, "--num_policies", "2", "--train_for_env_steps", "24000",
                  "--save_every_sec", "1", "--train_dir", str(train_dir)),
        env=_env(scratch), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        checkpoints = train_dir / "CartPole-v1" / "checkpoints" / "p0"
        deadline = time.monotonic() + 120
        while not list(checkpoints.glob("*.pt")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(checkpoints.glob("*.pt")), "no checkpoint before the kill"
        runners = [p for p in descendants(job.pid) if _is_rank_runner(p, job.pid)]
        victim = next(p for p in runners if _environ(p).get("RANK") == "1")
        os.kill(victim, signal.SIGKILL)
        out, _ = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 0, out[-4000:]
    resumed = re.findall(
        r"policy 0 resumed from (\S+) \(env steps (\d+), policy version (\d+)\)", out
    )
    assert resumed, out[-4000:]
    path, env_steps, version = resumed[-1]
    assert (int(version), int(env_steps)) == checkpoint_info(Path(path))
    summary = json.loads((train_dir / "CartPole-v1" / "summary.json").read_text())
    assert summary["env_steps"] >= 24000 and summary["world_size"] == 2
    assert out.count("stopped because:") == 1, out[-4000:]  # rank 0 reports alone
    assert [p.name for p in train_dir.iterdir()] == ["CartPole-v1"]
    assert not list(scratch.glob("sampleforge_rank*"))  # rank 1's scratch folder is gone
    for p in (0, 1):
        assert list((train_dir / "CartPole-v1" / "checkpoints" / f"p{p}").glob("*.pt"))


@pytest.mark.benchmark
def test_cartpole_learns_with_2_ranks_to_the_solve_line(tmp_path, scratch):
    """Two ranks, each collecting half of the single rank's dataset (the same learning work
    per sample): the vector family's CartPole reaches 475 within 300K env steps, as one rank
    does (docs/distributed.md: 139K-188K steps over seeds 1-3)."""
    summary = _torchrun_to_the_end(
        tmp_path / "runs", scratch, 2, "--env", "CartPole-v1", "--distributed", "true",
        "--seed", "1", "--batch_size", "256", "--train_for_env_steps", "300000",
        "--stop_at_mean_return", "475",
    )  # fmt: skip
    assert summary["world_size"] == 2
    assert summary["best_mean_return"] >= 475, summary


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(
        item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
    )


def _is_rank_runner(pid: int, launcher: int) -> bool:
    """A rank's own process (the runner): the launcher's agent's child with a RANK."""
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return False
    return (
        "RANK" in _environ(pid)
        and parent in ({launcher} | descendants(launcher))
        and ("RANK" not in _environ(parent))
    )


@pytest.mark.gpu
def test_torchrun_with_one_rank_per_gpu_trains_on_cuda_through_nccl(tmp_path, scratch):
    """The multi-GPU path: `--device cuda` means cuda:LOCAL_RANK, and the learners average
    over NCCL (one rank per GPU, two at most; a one-GPU machine runs it with one rank)."""
    import torch

    gpus = min(2, torch.cuda.device_count())
    summary = _torchrun_to_the_end(
        tmp_path / "runs", scratch, gpus, *SMALL, "--device", "cuda",
        "--train_for_env_steps", "20000",
    )  # fmt: skip
    assert summary["env_steps"] >= 20000 and summary["world_size"] == gpus


def _torchrun_to_the_end(train_dir: Path, scratch: Path, ranks: int, *train_args: str) -> dict:
    """`sampleforge train` on `ranks` local ranks under torchrun, to its end: its summary."""
    job = subprocess.run(
        _torchrun(f"--nproc-per-node={ranks}", "-m", "sampleforge", "train", *train_args,
                  "--train_dir", str(train_dir)),
        env=_env(scratch), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-4000:]
    return json.loads((train_dir / "CartPole-v1" / "summary.json").read_text())
