"""Soak test: a long training run, watched from outside for leaks and slowdowns.

    python benchmarks/soak.py --minutes 30 --env atari_breakout

Starts `sampleforge train` as a subprocess and samples, every `--every` seconds, each of its
processes' resident memory, open files and threads, plus /dev/shm and the run's FPS (from
progress.csv). After `--warmup` minutes it reports per process the memory growth in MB per hour
(least-squares slope), the change in open files and threads, and FPS per 5-minute window
relative to their median. The run is then stopped with SIGINT and must exit cleanly.

A learner's resident size swings by tens of MB within each SGD step (activations allocated
and freed), so a slope through single samples mostly measures where in its step each sample
fell. Besides that raw slope the report gives the slopes of each minute's lowest and highest
sample (the floor and the peak): a leak lifts both; a step's transient memory lifts neither.
It also splits the resident size into private memory (RssAnon: heaps) and shared memory
(RssShmem: trajectory buffer, weights, queue rings).

Targets (docs/reliability.md): growth < 5 MB/hour per process; files, threads and /dev/shm flat;
every 5-minute FPS window within 10% of the median.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def process_tree(root: int) -> dict[int, str]:
    """{pid: name} of `root` and its descendants."""
    parents, names = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                names[int(entry.name)] = stat[stat.index("(") + 1 : stat.rindex(")")]
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return {p: names.get(p, "?") for p in tree}


def sample_process(pid: int) -> dict[str, float] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {
            "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
            "anon_mb": int(fields["RssAnon"].split()[0]) / 1024,
            "shmem_mb": int(fields["RssShmem"].split()[0]) / 1024,
            "threads": int(fields["Threads"]),
            "files": len(os.listdir(f"/proc/{pid}/fd")),
        }
    except (OSError, KeyError):
        return None


def slope_per_hour(times: list[float], values: list[float]) -> float:
    if len(times) < 3:
        return 0.0
    mt, mv = statistics.fmean(times), statistics.fmean(values)
    var = sum((t - mt) ** 2 for t in times)
    return 3600 * sum((t - mt) * (v - mv) for t, v in zip(times, values)) / var if var else 0.0


def minute_extremes(
    times: list[float], values: list[float], window_sec: float = 60
) -> tuple[list[float], list[float], list[float]]:
    """(middle, lowest value, highest value) of each `window_sec` window of samples; a window
    the samples cover for less than 80% of its length (the last one, usually) is left out."""
    windows: dict[int, list[tuple[float, float]]] = {}
    for t, v in zip(times, values):
        windows.setdefault(int((t - times[0]) // window_sec), []).append((t, v))
    middles, lows, highs = [], [], []
    for samples in windows.values():
        ts, vs = [t for t, _ in samples], [v for _, v in samples]
        if ts[-1] - ts[0] >= 0.8 * window_sec:
            middles.append((ts[0] + ts[-1]) / 2)
            lows.append(min(vs))
            highs.append(max(vs))
    return middles, lows, highs


def fps_windows(progress: Path, since: float, window_sec: float = 300) -> list[float]:
    """Env steps per second in consecutive windows of `window_sec`, from progress.csv."""
    with open(progress) as f:
        rows = [(float(r["wall_time"]), float(r["env_steps"])) for r in csv.DictReader(f)]
    rows = [r for r in rows if r[0] >= since]
    out, start = [], 0
    for i in range(1, len(rows)):
        if rows[i][0] - rows[start][0] >= window_sec:
            out.append((rows[i][1] - rows[start][1]) / (rows[i][0] - rows[start][0]))
            start = i
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=3, help="minutes ignored at the start")
    parser.add_argument("--every", type=float, default=2, help="seconds between samples")
    parser.add_argument("--env", default="atari_breakout")
    parser.add_argument("--json", type=Path, default=None)
    args, train_args = parser.parse_known_args()
    train_dir = Path(tempfile.mkdtemp(prefix="soak_"))
    shm_before = set(os.listdir("/dev/shm"))
    cmd = [
        sys.executable,
        "-m",
        "sampleforge.cli.main",
        "train",
        "--env",
        args.env,
        "--train_dir",
        str(train_dir),
        "--experiment",
        "soak",
        "--stop_at_mean_return",
        "inf",
        # Time, not steps, ends the run: at 5,000 frames/s the default 10M steps last 34 min.
        "--train_for_seconds",
        str(args.minutes * 60 + 600),
        "--train_for_env_steps",
        str(10**15),
        "--report_every_sec",
        "10",
        *train_args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    series: dict[str, dict[str, list[float]]] = {}
    t_start, shm_counts = time.monotonic(), []
    warm = args.warmup * 60
    while time.monotonic() - t_start < args.minutes * 60 and proc.poll() is None:
        time.sleep(args.every)
        now = time.monotonic() - t_start
        for pid, name in process_tree(proc.pid).items():
            sample = sample_process(pid)
            if sample is None or now < warm:
                continue
            key = f"{name}:{pid}"
            s = series.setdefault(
                key,
                {"t": [], "rss_mb": [], "anon_mb": [], "shmem_mb": [], "threads": [], "files": []},
            )
            s["t"].append(now)
            for k, v in sample.items():
                s[k].append(v)
        if now >= warm:
            shm_counts.append(len(os.listdir("/dev/shm")))
    proc.send_signal(signal.SIGINT)
    exit_code = proc.wait(timeout=60)
    report = {
        "minutes": args.minutes,
        "env": args.env,
        "exit_code": exit_code,
        "shm_entries_min_max": [min(shm_counts, default=0), max(shm_counts, default=0)],
        "shm_left_behind": sorted(set(os.listdir("/dev/shm")) - shm_before),
        "processes": {},
    }
    for key, s in series.items():
        middles, floors, peaks = minute_extremes(s["t"], s["rss_mb"])
        report["processes"][key] = {
            "rss_mb_start": s["rss_mb"][0],
            "rss_mb_end": s["rss_mb"][-1],
            "rss_growth_mb_per_hour": slope_per_hour(s["t"], s["rss_mb"]),
            "rss_floor_growth_mb_per_hour": slope_per_hour(middles, floors),
            "rss_peak_growth_mb_per_hour": slope_per_hour(middles, peaks),
            # Private (heap) and shared (buffers, queue rings) parts of the resident size.
            "anon_growth_mb_per_hour": slope_per_hour(s["t"], s["anon_mb"]),
            "shmem_growth_mb_per_hour": slope_per_hour(s["t"], s["shmem_mb"]),
            "threads_min_max": [min(s["threads"]), max(s["threads"])],
            "files_min_max": [min(s["files"]), max(s["files"])],
        }
    windows = fps_windows(train_dir / "soak" / "progress.csv", since=warm)
    median = statistics.median(windows) if windows else 0.0
    report["fps_windows"] = windows
    report["fps_worst_deviation"] = max((abs(w / median - 1) for w in windows), default=0.0)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
