"""A whole training run, in this process, and the learner reports it wrote to progress.csv."""

from __future__ import annotations

import csv

from sampleforge.components.runner import Runner
from sampleforge.config import Config
from sampleforge.telemetry.summary import RunSummary


def train_reading_reports(cfg: Config) -> tuple[RunSummary, list[dict[str, str]]]:
    """Train `cfg` to its end; its summary and the progress.csv rows with a learner report
    (those with a policy lag)."""
    with Runner(cfg) as runner:
        summary = runner.train()
        with open(runner.exp.path / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    return summary, [r for r in rows if r.get("policy_lag/mean")]
