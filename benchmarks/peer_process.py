"""A peer in its own virtualenv: the virtualenv, made on first use, and a run, one process
given a JSON job, answering one JSON line per evaluation ({env_steps, eval_mean,
wall_seconds})."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_peer_job(python: Path, script: str, job: dict, label: str) -> list[dict]:
    """Runs `script` (source text) under `python` with `job`; returns and prints its
    evaluations, or exits with the end of its stderr if it fails."""
    proc = subprocess.run(
        [str(python), "-c", script, json.dumps(job)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"the {label} peer failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        print(f"  {label} seed {job['seed']}: {r['env_steps']:>8,} steps "
              f"{r['wall_seconds']:7.1f} s  evaluation {r['eval_mean']:8.2f}")  # fmt: skip
    return rows


def peer_python(venv: Path, packages: list[str]) -> Path:
    """The python of the virtualenv `venv`, made on first use with this machine's CPU torch
    first (so no other torch build is pulled in) and then `packages`."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating the peer's virtualenv in {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, *packages], check=True)
    return python
