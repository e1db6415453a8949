"""The Atari peer of the learning-curve benchmarks: Stable-Baselines3's DQN with RL Zoo's Atari
settings, run in a virtualenv of its own (never a dependency of sampleforge), one run after
the other with ours on the same machine.

    python benchmarks/learning_curves.py --env atari_pong --algorithm pqn --seeds 1 \
        --peer sb3_dqn --peer_minutes 60

The peer plays the same protocol as sampleforge's atari envs (NoFrameskip-v4, 30 no-ops, a
4-frame skip with max-pooling, episodic life, fire reset, clipped rewards for training, 84 x 84
grey, 4 frames stacked: SB3's `AtariWrapper`) and reports, every 30 s of wall time, the mean
true game return of its last 100 episodes, as `sampleforge train` does. Training is one
process; torch gets both cores, as the whole machine is the budget.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from off_policy_learning import _peer_python

from sampleforge.envs.atari import ATARI_FRAMESKIP, ATARI_GAMES

# RL Zoo's DQN settings for every Atari game (DLR-RM/rl-baselines3-zoo, hyperparams/dqn.yml,
# the `atari` entry): 1e7 agent steps (4e7 frames), epsilon to 0.01 over the first tenth.
ZOO_ATARI_DQN = dict(
    buffer_size=100_000,
    learning_rate=1e-4,
    batch_size=32,
    learning_starts=100_000,
    target_update_interval=1_000,
    train_freq=4,
    gradient_steps=1,
    exploration_fraction=0.1,
    exploration_final_eps=0.01,
    optimize_memory_usage=False,
)
ZOO_ATARI_TIMESTEPS = 10_000_000

# Runs inside the peer's virtualenv: argv[1] is a JSON job; prints one JSON line per report.
_PEER_SCRIPT = r"""
import json, sys, time
import gymnasium as gym, ale_py, numpy as np, torch
gym.register_envs(ale_py)
job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

class Report(BaseCallback):
    def __init__(self):
        super().__init__(); self.next = job["report_every_sec"]
    def _on_step(self):
        wall = time.perf_counter() - started
        frames = self.num_timesteps * job["frameskip"]
        done = wall >= job["seconds"] or frames >= job["frames"]
        if wall >= self.next or done:
            self.next += job["report_every_sec"]
            returns = [e["r"] for e in self.model.ep_info_buffer]
            print(json.dumps({"frames": frames, "wall_seconds": wall, "episodes": len(returns),
                              "mean_return": float(np.mean(returns)) if returns else None}),
                  flush=True)
        return not done

started = time.perf_counter()
env = VecFrameStack(make_atari_env(job["env_id"], n_envs=1, seed=job["seed"]), n_stack=4)
model = DQN("CnnPolicy", env, seed=job["seed"], verbose=0, **job["settings"])
model.learn(job["timesteps"], callback=Report())
"""


def run_sb3_dqn(
    env: str, seed: int, frames: int, minutes: float, out_csv: Path, venv: Path
) -> list[dict]:
    """One seed of SB3 DQN on sampleforge env `env` (an atari_* name) for at most `frames`
    frames or `minutes` of wall time; writes and returns its reports
    [{frames, wall_seconds, episodes, mean_return}]."""
    if env not in ATARI_GAMES:
        sys.exit(f"--peer sb3_dqn: {env!r} is not an Atari env; expected one of {ATARI_GAMES}")
    python = _atari_ready(_peer_python(venv))
    job = {
        "env_id": ATARI_GAMES[env],
        "seed": seed,
        "frames": frames,
        "seconds": minutes * 60,
        "frameskip": ATARI_FRAMESKIP,
        "timesteps": ZOO_ATARI_TIMESTEPS,
        "settings": ZOO_ATARI_DQN,
        "threads": 2,
        "report_every_sec": 30,
    }
    rows: list[dict] = []
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        [str(python), "-c", _PEER_SCRIPT, json.dumps(job)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                r = rows[-1]
                print(f"  sb3 dqn seed {seed}: {r['frames']:>10,} frames "
                      f"{r['wall_seconds'] / 60:6.1f} min  mean return {r['mean_return']}",
                      flush=True)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"the peer failed (exit {proc.returncode})")
    write_reports(rows, out_csv)
    return rows


def write_reports(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["frames", "wall_seconds", "episodes", "mean_return"])
        writer.writeheader()
        writer.writerows(rows)


def read_reports(path: Path) -> list[dict]:
    """The reports of a peer run written by `run_sb3_dqn`, those with a return only."""
    with path.open() as f:
        return [
            {k: float(v) for k, v in row.items()}
            for row in csv.DictReader(f)
            if row["mean_return"] not in ("", "None")
        ]


def _atari_ready(python: Path) -> Path:
    """The peer's python, with the Atari emulator and SB3's image wrappers installed."""
    check = subprocess.run([str(python), "-c", "import ale_py, cv2"], capture_output=True)
    if check.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "ale-py", "opencv-python-headless"],
            check=True,
        )
    return python
