"""The learner's thread settings on a quiet machine and beside other busy processes.

    python benchmarks/learner_threads_contention.py --algorithm sac --env HalfCheetah-v5
    python benchmarks/learner_threads_contention.py --hogs 2 --warmup 20 --duration 150

For each learner setup (one thread; `learner_torch_threads` threads spinning between parallel
regions; the same with `learner_threads_adaptive`), `sampleforge bench --json` measures the
learner's SGD steps a second in training, first on a quiet machine and then beside `--hogs`
processes that each keep a core busy (a busy loop in Python, as a test run or another job
would), one run after the other. Prints the table, each setup's ratio to one thread under the
same load and the thread count the adaptive runs ended on, and writes it with its settings as
`<out>/learner_threads_contention.json`. The default measurement (150 s) holds the adaptive
learner's first trials after its first decision, so their cost is in its figure.

A hog runs for the whole bench, its isolated measurements included, so the bench withholds its
ratios to the compute limit then; the SGD steps a second in training are what this compares.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SETUPS = {
    "one thread": {"learner_torch_threads": "1"},
    "spinning threads": {"learner_threads_spin": "true"},
    "spinning threads, adaptive": {
        "learner_threads_spin": "true",
        "learner_threads_adaptive": "true",
    },
}

HOG = "while True: pass"


def bench(args: argparse.Namespace, settings: dict[str, str]) -> dict:
    """One `sampleforge bench --json` run: its JSON object."""
    command = [
        sys.executable, "-m", "sampleforge", "bench", "--algorithm", args.algorithm,
        "--env", args.env, "--warmup", str(args.warmup), "--duration", str(args.duration),
        "--json", "true",
    ]  # fmt: skip
    if "learner_torch_threads" not in settings:
        command += ["--learner_torch_threads", str(args.threads)]
    for key, value in settings.items():
        command += [f"--{key}", value]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = [text for text in done.stdout.splitlines() if text.startswith("{")]
    if not lines:
        raise SystemExit(f"bench printed no JSON line: {done.stdout.strip()[-2000:]}")
    return json.loads(lines[-1])


def measure(args: argparse.Namespace, hogs: int) -> dict[str, dict[str, float]]:
    """Each setup's SGD steps a second (and learner threads at the end) beside `hogs` busy
    processes."""
    load = f"{hogs} busy" if hogs else "quiet"
    busy: list[subprocess.Popen] = []
    try:
        busy += [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        rows = {}
        for name, settings in SETUPS.items():
            result = bench(args, settings)
            threads = result["perf"].get("perf/learner_threads")
            rows[name] = {"sgd_steps_per_sec": result["sgd_steps_per_sec"], "threads": threads}
            ended = "" if threads is None else f" (ended on {threads:.0f} threads)"
            print(f"  {load}: {name:<28} {result['sgd_steps_per_sec']:7.1f} SGD steps/s{ended}")
        return rows
    finally:
        for process in busy:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="sac")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--threads", type=int, default=2, help="the setups' thread count")
    parser.add_argument("--hogs", type=int, default=1, help="busy processes beside the run")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--out", default="benchmark_results")
    args = parser.parse_args()
    if args.hogs < 1:
        parser.error(
            f"--hogs must be at least 1 (the quiet machine is measured anyway); got {args.hogs}"
        )
    table = {"quiet": measure(args, 0), f"{args.hogs} busy": measure(args, args.hogs)}
    print(f"\n{args.algorithm} on {args.env}: SGD steps a second in training (ratio to one thread)")
    for load, rows in table.items():
        one = rows["one thread"]["sgd_steps_per_sec"]
        cells = "  ".join(
            f"{name}: {row['sgd_steps_per_sec']:6.1f} ({row['sgd_steps_per_sec'] / one:4.2f}x)"
            for name, row in rows.items()
        )
        print(f"  {load:<8} {cells}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"settings": vars(args), "date": time.strftime("%Y-%m-%d"), "results": table}
    (out / "learner_threads_contention.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
