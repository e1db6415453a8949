"""The Atari peer of the learning-curve benchmarks: Stable-Baselines3's DQN with RL Zoo's Atari
settings, run in a virtualenv of its own (never a dependency of sampleforge), one run after
the other with ours on the same machine.

    python benchmarks/learning_curves.py --env atari_pong --algorithm pqn --seeds 1 \
        --peer sb3_dqn --peer_minutes 60
    python benchmarks/atari_peer.py --env atari_pong --seeds 1 --frames 5000000 \
        --minutes 170 --chunk_minutes 100 --train_dir runs/peers            # then --resume

The peer plays the same protocol as sampleforge's atari envs (NoFrameskip-v4, 30 no-ops, a
4-frame skip with max-pooling, episodic life, fire reset, clipped rewards for training, 84 x 84
grey, 4 frames stacked: SB3's `AtariWrapper`) and reports, every 30 s of wall time, the mean
true game return of its last 100 episodes, as `sampleforge train` does. Training is one
process; torch gets both cores, as the whole machine is the budget.

A run longer than a session goes in chunks (`--chunk_minutes`): at the end of a chunk the peer
saves its model, optimizer, counters and replay buffer (about 5.6 GB for RL Zoo's 100K
transitions) into `<train_dir>/<env>_sb3_dqn_seed<seed>/`, and `--resume` continues from
them. The wall time adds up over chunks, the time to save and load excluded (as for
sampleforge's resumed runs); the game in progress at a chunk's end is the one thing lost.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
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
# A chunk's end saves the model (SB3's zip: weights, optimizer, counters, the exploration
# schedule, the last 100 episodes) and the replay buffer, each to a temporary name first, and
# `state.json` last: a chunk killed while saving leaves the previous chunk's state whole.
_PEER_SCRIPT = r"""
import json, os, sys, time
from pathlib import Path
import gymnasium as gym, ale_py, numpy as np, torch
gym.register_envs(ale_py)
job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

state_dir = Path(job["state_dir"])
env = VecFrameStack(make_atari_env(job["env_id"], n_envs=1, seed=job["seed"]), n_stack=4)
wall_before = 0.0
if job["resume"]:
    state = json.loads((state_dir / "state.json").read_text())
    model = DQN.load(state_dir / "model.zip", env=env)
    with open(state_dir / "replay.pkl", "rb") as f:
        model.load_replay_buffer(f)
    # The saved observation belongs to the previous process's emulator: start a new game.
    model._last_obs = None
    assert model.num_timesteps == state["num_timesteps"], (model.num_timesteps, state)
    wall_before = state["wall_seconds"]
else:
    model = DQN("CnnPolicy", env, seed=job["seed"], verbose=0, **job["settings"])

class Report(BaseCallback):
    def __init__(self):
        super().__init__(); self.next = wall_before + job["report_every_sec"]
        self.finished, self.wall = False, wall_before
    def _on_step(self):
        chunk = time.perf_counter() - started
        wall = wall_before + chunk
        frames = self.num_timesteps * job["frameskip"]
        self.finished = wall >= job["seconds"] or frames >= job["frames"]
        paused = chunk >= job["chunk_seconds"]
        if wall >= self.next or self.finished or paused:
            self.next += job["report_every_sec"]
            returns = [e["r"] for e in self.model.ep_info_buffer]
            print(json.dumps({"frames": frames, "wall_seconds": wall, "episodes": len(returns),
                              "mean_return": float(np.mean(returns)) if returns else None}),
                  flush=True)
        self.wall = wall
        return not (self.finished or paused)

report = Report()
started = time.perf_counter()
model.learn(job["timesteps"] - model.num_timesteps, callback=report,
            reset_num_timesteps=not job["resume"])
state_dir.mkdir(parents=True, exist_ok=True)
if not report.finished:
    model.save(state_dir / "model.tmp.zip")
    with open(state_dir / "replay.tmp.pkl", "wb") as f:
        model.save_replay_buffer(f)
    os.replace(state_dir / "model.tmp.zip", state_dir / "model.zip")
    os.replace(state_dir / "replay.tmp.pkl", state_dir / "replay.pkl")
state = {"num_timesteps": model.num_timesteps, "wall_seconds": report.wall,
         "finished": report.finished}
(state_dir / "state.tmp.json").write_text(json.dumps(state))
os.replace(state_dir / "state.tmp.json", state_dir / "state.json")
"""


def run_sb3_dqn(
    env: str,
    seed: int,
    frames: int,
    minutes: float,
    out_csv: Path,
    venv: Path,
    chunk_minutes: float | None = None,
    resume: bool = False,
) -> list[dict]:
    """One seed of SB3 DQN on sampleforge env `env` (an atari_* name) for at most `frames`
    frames or `minutes` of wall time in all, `chunk_minutes` of them in this call (None: no
    limit); with `resume`, continues the run saved next to `out_csv` (or starts one if there
    is none). Writes `out_csv` and returns all its reports [{frames, wall_seconds, episodes,
    mean_return}]."""
    if env not in ATARI_GAMES:
        sys.exit(f"--peer sb3_dqn: {env!r} is not an Atari env; expected one of {ATARI_GAMES}")
    state_dir = out_csv.with_suffix("")
    saved = _saved_state(state_dir) if resume else None
    if saved is not None and saved["finished"]:
        print(f"  sb3 dqn seed {seed}: finished earlier ({state_dir}); not run again")
        return read_reports(out_csv)
    python = _atari_ready(_peer_python(venv))
    job = {
        "env_id": ATARI_GAMES[env],
        "seed": seed,
        "frames": frames,
        "seconds": minutes * 60,
        "chunk_seconds": math.inf if chunk_minutes is None else chunk_minutes * 60,
        "state_dir": str(state_dir),
        "resume": saved is not None,
        "frameskip": ATARI_FRAMESKIP,
        "timesteps": ZOO_ATARI_TIMESTEPS,
        "settings": ZOO_ATARI_DQN,
        "threads": 2,
        "report_every_sec": 30,
    }
    rows = _reports_before(out_csv, saved)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        [str(python), "-c", _PEER_SCRIPT, json.dumps(job)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                write_reports(rows, out_csv)
                r = rows[-1]
                print(f"  sb3 dqn seed {seed}: {r['frames']:>10,} frames "
                      f"{r['wall_seconds'] / 60:6.1f} min  mean return {r['mean_return']}",
                      flush=True)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"the peer failed (exit {proc.returncode})")
    return rows


def _saved_state(state_dir: Path) -> dict | None:
    """The state a previous chunk left in `state_dir`, or None if it left none."""
    path = state_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else None


def _reports_before(out_csv: Path, saved: dict | None) -> list[dict]:
    """The reports of the chunks before a resumed one, up to its saved wall time (a report
    printed after the last save would be repeated); none for a new run."""
    if saved is None or not out_csv.exists():
        return []
    return [
        r
        for r in read_reports(out_csv, all_rows=True)
        if r["wall_seconds"] <= saved["wall_seconds"]
    ]


def reports_path(train_dir: Path, env: str, seed: int) -> Path:
    """Where a peer run's reports go (its saved state beside them, without the suffix)."""
    return train_dir / f"{env}_sb3_dqn_seed{seed}.csv"


def write_reports(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["frames", "wall_seconds", "episodes", "mean_return"])
        writer.writeheader()
        writer.writerows(rows)


def read_reports(path: Path, all_rows: bool = False) -> list[dict]:
    """The reports of a peer run written by `run_sb3_dqn`: those with a return only, or with
    `all_rows` also the early ones before the first finished episode."""
    with path.open() as f:
        return [
            {k: None if v in ("", "None") else float(v) for k, v in row.items()}
            for row in csv.DictReader(f)
            if all_rows or row["mean_return"] not in ("", "None")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, help=f"one of {sorted(ATARI_GAMES)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--frames", type=int, default=ZOO_ATARI_TIMESTEPS * ATARI_FRAMESKIP)
    parser.add_argument("--minutes", type=float, required=True, help="wall-time cap in all")
    parser.add_argument(
        "--chunk_minutes", type=float, default=None, help="wall time of this call's chunk"
    )
    parser.add_argument("--train_dir", type=Path, required=True)
    parser.add_argument("--resume", action="store_true", help="continue the saved run")
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache/sampleforge-peers/sb3")
    args = parser.parse_args()
    for seed in args.seeds:
        out_csv = reports_path(args.train_dir, args.env, seed)
        run_sb3_dqn(
            args.env,
            seed,
            args.frames,
            args.minutes,
            out_csv,
            args.venv,
            args.chunk_minutes,
            args.resume,
        )


if __name__ == "__main__":
    main()
