"""CleanRL's `pqn.py` as the PQN peer of `off_policy_learning.py`, run unchanged in a
virtualenv of its own (never a dependency of sampleforge), one run after the other with ours.

    git clone https://github.com/vwxyzjn/cleanrl   # the script was read at fe8d8a0 (2026-04)
    python benchmarks/off_policy_learning.py --algorithm pqn --env CartPole-v1 \
        --steps 500000 --peer cleanrl --cleanrl_script cleanrl/cleanrl/pqn.py --stop_at_target

The virtualenv holds what CleanRL's `pyproject.toml` pins for it (gymnasium 0.29.1, so numpy
below 2) with this machine's torch, and tyro for its command line. A harness executes the
script as `__main__` with CleanRL's own settings (given only `--env-id`, `--seed`,
`--total-timesteps` and `--no-cuda`) and
replaces its TensorBoard writer with one that, every `eval_every` env steps (at the end of the
iteration that crosses the mark, when the script logs its loss), plays `eval_episodes` greedy
episodes with the script's `q_network` on a separate env, as `off_policy_learning.py` does for
ours. Evaluation time is excluded from the wall time, as for ours; torch gets one thread, as in
CleanRL's published CPU figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

from peer_process import peer_python, run_peer_job

# Runs inside the peer's virtualenv: argv[1] is a JSON job; prints one JSON line per evaluation.
_HARNESS = r"""
import json, sys, time, types
import gymnasium as gym, numpy as np, torch
job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])

class Stop(Exception):
    pass

class EvaluatingWriter:
    # pqn.py logs `losses/td_loss` once per iteration, after its SGD steps.
    def __init__(self, *args, **kwargs):
        self.next = job["eval_every"]; self.spent = 0.0
    def add_text(self, *args, **kwargs):
        pass
    def close(self):
        pass
    def add_scalar(self, tag, value, step):
        if tag != "losses/td_loss" or step < self.next:
            return
        self.next += job["eval_every"]; t = time.perf_counter()
        mean = evaluate(script["q_network"])
        self.spent += time.perf_counter() - t
        wall = time.perf_counter() - started - self.spent
        print(json.dumps({"env_steps": int(step), "eval_mean": mean, "wall_seconds": wall}),
              flush=True)
        if wall >= job["seconds"] or (job["stop_at"] is not None and mean >= job["stop_at"]):
            raise Stop

def evaluate(q_network):
    env, returns = gym.make(job["env"]), []
    for episode in range(job["eval_episodes"]):
        obs, _ = env.reset(seed=10_000 + job["seed"] + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = int(q_network(torch.as_tensor(obs, dtype=torch.float32)[None]).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            done, total = terminated or truncated, total + float(reward)
        returns.append(total)
    return float(np.mean(returns))

tensorboard = types.ModuleType("torch.utils.tensorboard")
tensorboard.SummaryWriter = EvaluatingWriter
sys.modules["torch.utils.tensorboard"] = tensorboard
sys.argv = [job["script"], "--seed", str(job["seed"]), "--env-id", job["env"],
            "--total-timesteps", str(job["steps"]), "--no-cuda"]
script = {"__name__": "__main__", "__file__": job["script"]}
code = compile(open(job["script"]).read(), job["script"], "exec")
started = time.perf_counter()
try:
    exec(code, script)
except Stop:
    pass
"""


def run_cleanrl_pqn(
    env: str,
    seed: int,
    steps: int,
    seconds: float,
    eval_every: int,
    eval_episodes: int,
    stop_at: float | None,
    script: Path,
    venv: Path,
) -> list[dict]:
    """One seed of CleanRL's `pqn.py` on `env`: [{env_steps, wall_seconds, eval_mean}] per
    evaluation, until `steps`, `seconds` of training or (given) the first evaluation at or
    above `stop_at`."""
    if not script.is_file():
        sys.exit(f"--cleanrl_script: {str(script)!r} is not a file; give CleanRL's cleanrl/pqn.py")
    job = {
        "script": str(script.resolve()),
        "env": env,
        "seed": seed,
        "steps": steps,
        "seconds": seconds if seconds != float("inf") else 1e30,
        "eval_every": eval_every,
        "eval_episodes": eval_episodes,
        "stop_at": stop_at,
        "threads": 1,
    }
    return run_peer_job(_cleanrl_python(venv), _HARNESS, job, "cleanrl")


def _cleanrl_python(venv: Path) -> Path:
    """The CleanRL virtualenv's python, with what CleanRL's pyproject pins for pqn.py."""
    return peer_python(venv, ["gymnasium==0.29.1", "numpy<2", "tyro"])
