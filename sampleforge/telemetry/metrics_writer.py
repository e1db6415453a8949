"""Scalar metrics to TensorBoard, ``progress.csv`` and optionally Weights & Biases.

Responsibility: persist the runner's periodic scalar reports, keyed by env
steps, to TensorBoard event files (under ``<experiment_dir>/tb``), to
``<experiment_dir>/progress.csv`` for scripts and plots, and to any extra sinks
(the W&B run of ``with_wandb``, see ``wandb_sink.py``).

What this module must not do: compute or aggregate metrics, invent tag names
(tags arrive namespaced, e.g. ``episode/return_mean``, ``perf/fps``), or print.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from typing_extensions import Self

    from sampleforge.config import Config

__all__ = ["CSV_NAME", "TENSORBOARD_SUBDIR", "MetricsWriter", "ScalarSink"]

CSV_NAME = "progress.csv"
TENSORBOARD_SUBDIR = "tb"
_FIXED_COLUMNS = ("env_steps", "wall_time")
_TB_FLUSH_SECS = 5


class ScalarSink(Protocol):
    """Another destination of the same rows (e.g. `WandbSink`)."""

    def write(self, env_steps: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class MetricsWriter:
    """Append-only metrics sink for one experiment.

    CSV columns are ``env_steps``, ``wall_time`` (seconds since start) and
    then the sorted union of all metric keys seen so far; missing values are
    empty. When a new key appears the file is rewritten once with the wider
    header (atomically), so the CSV is always rectangular and readable by
    ``csv.DictReader``/pandas. An existing ``progress.csv`` (resumed run) is
    appended to with its columns kept.
    """

    def __init__(
        self, experiment_dir: Path, *, tensorboard: bool = True, sinks: Sequence[ScalarSink] = ()
    ) -> None:
        """Open the CSV (and a TensorBoard writer if ``tensorboard``) in ``experiment_dir``;
        every row also goes to each of ``sinks``, which `close` closes."""
        self.experiment_dir = Path(experiment_dir)
        self.experiment_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.experiment_dir / CSV_NAME
        self._start = time.monotonic()
        self._columns = _read_header(self.csv_path) or list(_FIXED_COLUMNS)
        if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
            with open(self.csv_path, "w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerow(self._columns)
        self._closed = False
        self._tb = (
            _open_tensorboard(self.experiment_dir / TENSORBOARD_SUBDIR) if tensorboard else None
        )
        self._sinks = list(sinks)

    @classmethod
    def for_run(cls, cfg: Config, experiment_dir: Path) -> MetricsWriter:
        """The writer of a training run: TensorBoard if ``cfg.tensorboard``, the experiment's
        W&B run if ``cfg.with_wandb`` (ConfigError, before anything is opened, if the wandb
        extra is not installed)."""
        sinks: list[ScalarSink] = []
        if cfg.with_wandb:
            from sampleforge.telemetry.wandb_sink import WandbSink

            sinks.append(WandbSink(experiment_dir, cfg))
        try:
            return cls(experiment_dir, tensorboard=cfg.tensorboard, sinks=sinks)
        except BaseException:
            for sink in sinks:
                sink.close()
            raise

    @property
    def columns(self) -> list[str]:
        """Current CSV header."""
        return list(self._columns)

    def write(
        self, env_steps: int, scalars: Mapping[str, float], wall_time: float | None = None
    ) -> None:
        """Record ``scalars`` at ``env_steps``.

        ``wall_time`` is seconds since the start of the run; by default the
        time since this writer was created. None values are skipped.
        """
        if self._closed:
            raise RuntimeError("MetricsWriter is closed")
        values = {key: float(value) for key, value in scalars.items() if value is not None}
        clash = set(values) & set(_FIXED_COLUMNS)
        if clash:
            raise ValueError(f"metric names {sorted(clash)} are reserved CSV columns")
        elapsed = time.monotonic() - self._start if wall_time is None else wall_time
        self._write_tensorboard(env_steps, values)
        self._write_csv_row({"env_steps": env_steps, "wall_time": round(elapsed, 3), **values})
        for sink in self._sinks:
            sink.write(env_steps, values)

    def close(self) -> None:
        """Flush and close every output; safe to call more than once."""
        self._closed = True
        sinks, self._sinks = self._sinks, []
        try:
            if self._tb is not None:
                self._tb.close()
                self._tb = None
        finally:
            for sink in sinks:
                sink.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_tensorboard(self, env_steps: int, values: dict[str, float]) -> None:
        # SummaryWriter flushes itself every _TB_FLUSH_SECS from a background thread.
        if self._tb is None:
            return
        for tag, value in values.items():
            self._tb.add_scalar(tag, value, global_step=env_steps)

    def _write_csv_row(self, row: dict[str, Any]) -> None:
        new_keys = set(row) - set(self._columns)
        if new_keys:
            self._widen_csv(new_keys)
        # Opened per row (rows come every few seconds): each row reaches the OS at once,
        # so a crash loses at most the row being written and no handle stays open.
        with open(self.csv_path, "a", newline="", encoding="utf-8") as f:
            # csv writes floats via repr: full precision, and nan/inf stay parseable by float().
            csv.DictWriter(f, fieldnames=self._columns).writerow(row)

    def _widen_csv(self, new_keys: set[str]) -> None:
        """Rewrite the CSV once with the union of old and new columns."""
        metrics = sorted((set(self._columns) | new_keys) - set(_FIXED_COLUMNS))
        columns = [*_FIXED_COLUMNS, *metrics]
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        tmp = self.csv_path.with_name(f".{CSV_NAME}.{os.getpid()}.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.csv_path)  # a crash mid-rewrite keeps the old, valid file
        self._columns = columns


def _read_header(path: Path) -> list[str] | None:
    if not path.exists():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f), None)


def _open_tensorboard(log_dir: Path) -> Any:
    # Imported lazily: TensorBoard is slow to import and unused with tensorboard=False.
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir), flush_secs=_TB_FLUSH_SECS)
