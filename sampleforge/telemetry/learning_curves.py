"""Learning curves of experiments, from their ``progress.csv``, drawn into one PNG.

Responsibility: read the metrics rows of experiment folders, group runs whose config.json is
the same apart from the seed and the experiment's name and place (``IGNORED_SETTINGS``), and
draw four panels with matplotlib's Agg backend (no display needed): mean return against env
steps (evaluation returns dashed, when there are any) and against wall time, FPS and policy
lag against env steps. A group of several runs is drawn as the mean over runs with a band of
one standard deviation, on the env-step (or time) range all its runs cover.

Wall time restarts at 0 when an experiment is resumed (a new writer); it is made cumulative
here so resumed runs plot as one line. The window of episodes behind the mean return restarts
too; `first_reach`, the frames and time to a score, counts only full windows.

`write_curves` keeps the mean-return curves of runs in one small CSV, to be committed beside a
plot so that the plot can be redrawn (`read_curves`) after the runs' folders are gone.

Must not: write anything but the PNG and the curves' CSV, or compute training metrics.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sampleforge.telemetry.metrics_writer import CSV_NAME

IGNORED_SETTINGS = ("seed", "experiment", "train_dir", "restart_behavior", "sources")
RETURN, EVAL_RETURN = "episode/return_mean", "eval/return_mean"
# Episodes behind each RETURN value; below the window's size (after a start or a resume) the
# mean is of fewer games and can touch a score the policy does not hold.
WINDOW_EPISODES = "episode/window_episodes"
FULL_WINDOW = 100
PANELS = (  # (metric, x column, title)
    (RETURN, "env_steps", "mean return vs env steps"),
    (RETURN, "wall_time", "mean return vs wall time (s)"),
    ("perf/fps_10s", "env_steps", "FPS (10 s window) vs env steps"),
    ("policy_lag/mean", "env_steps", "mean policy lag vs env steps"),
)
GRID_POINTS = 200
# What `write_curves` keeps of a run: enough for its curves and for `first_reach`.
CURVE_COLUMNS = ("env_steps", "wall_time", RETURN, WINDOW_EPISODES)


@dataclass(frozen=True)
class Run:
    """One experiment's metrics: column -> values (NaN where a row has none)."""

    name: str
    path: Path
    settings: dict
    columns: dict[str, np.ndarray]

    def full_window(self) -> np.ndarray:
        """Per row: whether its mean return is over a full window of FULL_WINDOW episodes.
        Rows written before the window's count was logged are taken as full."""
        counts = self.columns.get(WINDOW_EPISODES)
        if counts is None:
            return np.ones(len(next(iter(self.columns.values()), [])), dtype=bool)
        return ~np.isfinite(counts) | (counts >= FULL_WINDOW)

    def series(self, metric: str, x: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the rows where both are known, sorted by x. The mean return leaves out a
        resume's first rows, whose window refills from a few games, once a full one was seen."""
        if metric not in self.columns or x not in self.columns:
            return np.empty(0), np.empty(0)
        xs, ys = self.columns[x], self.columns[metric]
        keep = np.isfinite(xs) & np.isfinite(ys)
        if metric == RETURN:
            full = self.full_window()
            keep &= full | ~np.logical_or.accumulate(full)
        order = np.argsort(xs[keep], kind="stable")
        return xs[keep][order], ys[keep][order]


def read_run(path: Path | str) -> Run:
    """The metrics and config of the experiment folder `path`."""
    path = Path(path)
    csv_path = path / CSV_NAME
    if not csv_path.is_file():
        raise FileNotFoundError(f"{path} has no {CSV_NAME}: is it an experiment folder?")
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    names = rows[0].keys() if rows else []
    columns = {name: np.array([_number(row.get(name)) for row in rows]) for name in names}
    if "wall_time" in columns:
        columns["wall_time"] = _cumulative_time(columns["wall_time"])
    config_path = path / "config.json"
    settings = json.loads(config_path.read_text()) if config_path.is_file() else {}
    return Run(name=path.name, path=path, settings=settings, columns=columns)


def write_curves(runs: dict[str, Run], output: Path | str) -> Path:
    """The rows of `runs` ({label: run}) that carry a mean return, CURVE_COLUMNS of each (wall
    time cumulative over resumes), into the CSV `output` with the label in a first `run`
    column; returns its path."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(("run", *CURVE_COLUMNS))
        for label, run in runs.items():
            returns = run.columns.get(RETURN)
            if returns is None:
                continue
            for row in np.flatnonzero(np.isfinite(returns)).tolist():
                writer.writerow((label, *(_cell(run.columns.get(c), row) for c in CURVE_COLUMNS)))
    return output


def read_curves(path: Path | str) -> dict[str, Run]:
    """The runs that `write_curves` wrote into the CSV `path`, by label, in file order."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    labels = list(dict.fromkeys(row["run"] for row in rows))
    runs = {}
    for label in labels:
        mine = [row for row in rows if row["run"] == label]
        columns = {c: np.array([_number(row.get(c)) for row in mine]) for c in CURVE_COLUMNS}
        runs[label] = Run(name=label, path=path, settings={}, columns=columns)
    return runs


def first_reach(run: Run, target: float) -> tuple[float, float] | None:
    """(env steps, wall seconds) of the first report whose mean return over a full window of
    FULL_WINDOW episodes (`Run.full_window`) is at least `target`, or None."""
    steps, returns = run.columns.get("env_steps"), run.columns.get(RETURN)
    seconds = run.columns.get("wall_time")
    if steps is None or returns is None or seconds is None:
        return None
    keep = np.isfinite(steps) & np.isfinite(returns) & run.full_window() & (returns >= target)
    if not keep.any():
        return None
    first = np.flatnonzero(keep)[np.argmin(steps[keep])]
    return float(steps[first]), float(seconds[first])


def group_runs(runs: Sequence[Run]) -> list[list[Run]]:
    """Runs with the same settings apart from IGNORED_SETTINGS, in first-seen order."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        key = json.dumps(
            {k: v for k, v in run.settings.items() if k not in IGNORED_SETTINGS},
            sort_keys=True,
            default=str,
        )
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def mean_and_band(
    runs: Sequence[Run], metric: str, x: str, points: int = GRID_POINTS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid, mean, std) of `metric` over runs, interpolated on the x range all runs cover."""
    curves = [run.series(metric, x) for run in runs]
    curves = [(xs, ys) for xs, ys in curves if len(xs)]
    if not curves:
        return np.empty(0), np.empty(0), np.empty(0)
    start = max(xs[0] for xs, _ in curves)
    stop = min(xs[-1] for xs, _ in curves)
    if stop < start:
        return np.empty(0), np.empty(0), np.empty(0)
    grid = np.linspace(start, stop, points) if stop > start else np.array([start])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(axis=0), values.std(axis=0)


def plot_learning_curves(
    experiment_dirs: Sequence[Path | str], output: Path | str, *, title: str | None = None
) -> Path:
    """Draw the learning curves of the experiments into the PNG `output`; returns its path."""
    if not experiment_dirs:
        raise ValueError("no experiments to plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = group_runs([read_run(path) for path in experiment_dirs])
    labels = _labels(groups)
    figure = Figure(figsize=(12, 8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, 2).flatten()
    for ax, (metric, x, panel_title) in zip(axes, PANELS):
        for index, (group, label) in enumerate(zip(groups, labels)):
            color = f"C{index % 10}"
            _draw(ax, group, metric, x, label, color, "-")
            if metric == RETURN and x == "env_steps":
                _draw(ax, group, EVAL_RETURN, x, f"{label} (evaluation)", color, "--")
        ax.set_title(panel_title)
        ax.set_xlabel("wall time (s)" if x == "wall_time" else "env steps")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    figure.suptitle(title or ", ".join(labels))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    return output


def _draw(
    ax, group: Sequence[Run], metric: str, x: str, label: str, color: str, style: str
) -> None:
    if len(group) == 1:
        xs, ys = group[0].series(metric, x)
        if len(xs):
            ax.plot(xs, ys, style, color=color, label=label)
        return
    grid, mean, std = mean_and_band(group, metric, x)
    if len(grid):
        ax.plot(grid, mean, style, color=color, label=f"{label} (mean of {len(group)})")
        ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)


def _labels(groups: Sequence[Sequence[Run]]) -> list[str]:
    """Each group named by the settings that tell the groups apart, else by its first run."""
    settings = [group[0].settings for group in groups]
    keys = sorted({k for s in settings for k in s if k not in IGNORED_SETTINGS})
    differing = [k for k in keys if len({json.dumps(s.get(k), default=str) for s in settings}) > 1]
    labels = []
    for group, s in zip(groups, settings):
        if differing:
            labels.append(", ".join(f"{k}={s.get(k)}" for k in differing[:3]))
        else:
            labels.append(group[0].name if len(group) == 1 else f"{group[0].name} and others")
    return labels


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def _cell(values: np.ndarray | None, row: int) -> str:
    if values is None or not math.isfinite(values[row]):
        return ""
    return f"{values[row]:.10g}"


def _cumulative_time(times: np.ndarray) -> np.ndarray:
    """Wall time that goes on across resumes (where it fell back, add the time before)."""
    out = times.copy()
    offset, previous = 0.0, -math.inf
    for i, t in enumerate(times):
        if not math.isfinite(t):
            continue
        if t < previous:
            offset += previous
        previous = t
        out[i] = t + offset
    return out
