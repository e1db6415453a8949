"""Telemetry: metrics, console status, FPS, episode statistics and the run summary.

Responsibility: re-export the public API of the telemetry modules.
Must not: compute training quantities or decide reporting cadence (the runner does).
"""

from sampleforge.telemetry.console import ProgressBar, format_status_line
from sampleforge.telemetry.episode_stats import EpisodeStatsWindow, PopulationEpisodeWindows
from sampleforge.telemetry.fps import FpsMeter
from sampleforge.telemetry.metrics_writer import MetricsWriter
from sampleforge.telemetry.status import TrainingStatus
from sampleforge.telemetry.summary import STOP_REASONS, RunSummary, read_summary, write_summary

__all__ = [
    "STOP_REASONS",
    "EpisodeStatsWindow",
    "FpsMeter",
    "MetricsWriter",
    "PopulationEpisodeWindows",
    "ProgressBar",
    "RunSummary",
    "TrainingStatus",
    "format_status_line",
    "read_summary",
    "write_summary",
]
