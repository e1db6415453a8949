"""The run's episode windows, kept next to the checkpoints so that a resume continues them.

The last-100-episode windows (the run's, behind the status line, `summary.json` and
`stop_at_mean_return`, which holds each policy's, behind the best checkpoint and PBT) live in
the runner, not in the learners' checkpoints. Without this file a resumed run starts them
empty, and its first means come from a few games: one resumed Pong run reported a best mean
return of 20.0 from 3 games.

The runner rewrites `episode_windows.json` (atomically) whenever a learner reports a
checkpoint, with the name of each policy's newest checkpoint, and once more at the end of a
`train` call, with the episodes the workers reported when they paused. A resume restores the
windows only if every learner resumed from exactly those checkpoints; otherwise (an older
checkpoint because the newest was damaged, a file from another lineage) they start empty and
the log says why. They are taken when the reports reach the runner, a moment after the
checkpoint was written, so they can hold a few episodes the resumed run plays again.

Must not: hold learner state (that is the checkpoint's) or be read in the middle of a run.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sampleforge.checkpoint.experiment_dir import write_json_atomic
from sampleforge.telemetry.episode_stats import EpisodeStatsWindow, PopulationEpisodeWindows

log = logging.getLogger(__name__)

EPISODE_WINDOWS_FILENAME = "episode_windows.json"
# 2: the run's window holds each trained policy's own (PopulationEpisodeWindows)
FORMAT_VERSION = 2
Window = EpisodeStatsWindow | PopulationEpisodeWindows


def save_episode_windows(
    experiment: Path,
    checkpoints: Mapping[int, str | Path],
    windows: Mapping[str, Window],
) -> None:
    """Write `windows` ({name: window}) bound to `checkpoints` ({policy id: its newest})."""
    write_json_atomic(
        experiment / EPISODE_WINDOWS_FILENAME,
        {
            "format_version": FORMAT_VERSION,
            "checkpoints": {str(p): Path(c).name for p, c in checkpoints.items()},
            "windows": {name: window.state_dict() for name, window in windows.items()},
        },
    )


def restore_episode_windows(
    experiment: Path,
    resumed_from: Mapping[int, str | Path | None],
    windows: Mapping[str, Window],
) -> bool:
    """Load the saved windows into `windows` if they belong to the checkpoints the learners
    resumed from ({policy id: path, or None}); True if they were restored."""
    path = experiment / EPISODE_WINDOWS_FILENAME
    if not path.exists() or not any(resumed_from.values()):
        return False
    try:
        saved = json.loads(path.read_text())
        refusal = _refusal(saved, resumed_from, set(windows))
        if refusal is None:
            states = saved["windows"]
            for name, window in windows.items():  # every one parses before any is replaced
                copy.deepcopy(window).load_state_dict(states[name])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        refusal = f"cannot be read ({e})"
    if refusal is not None:
        log.warning("episode windows start empty: %s %s", path.name, refusal)
        return False
    for name, window in windows.items():
        window.load_state_dict(states[name])
    log.info("episode windows continue from %s", path.name)
    return True


def _refusal(
    saved: Any, resumed_from: Mapping[int, str | Path | None], names: set[str]
) -> str | None:
    """Why `saved` does not continue the checkpoints the learners resumed from."""
    if saved.get("format_version") != FORMAT_VERSION:
        return f"has format {saved.get('format_version')!r}, this version reads {FORMAT_VERSION}"
    loaded = {str(p): Path(c).name if c else None for p, c in resumed_from.items()}
    bound = saved["checkpoints"]
    if bound != loaded:
        return f"belongs to checkpoints {bound}, this run resumed from {loaded}"
    missing = names - set(saved["windows"])
    if missing:
        return f"lacks the windows {sorted(missing)}"
    return None
