"""The PBT history file: one JSON line per :class:`~sampleforge.pbt.population.PbtEvent`.

Responsible for: appending each round's events to ``<experiment_dir>/pbt_history.jsonl``
durably (flushed and fsynced once per round, so a crash loses nothing that was written) and
reading them back, e.g. to plot how hyperparameters evolved or to audit a run.

Must not: decide anything (that is :mod:`sampleforge.pbt.population`), rewrite or truncate
the file (it is only ever appended to, also across resumes), import torch, or touch processes.

A crash in the middle of a write can leave a torn last line. The next append first terminates
it with a newline so that the new events stay readable, and :meth:`PbtHistory.read` skips any
line that is not a valid event, with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from sampleforge.pbt.population import PbtEvent

__all__ = ["HISTORY_FILENAME", "PbtHistory"]

HISTORY_FILENAME = "pbt_history.jsonl"
"""Conventional name of the history file inside an experiment directory."""


class PbtHistory:
    """Append-only JSON-lines log of PBT events at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, events: Sequence[PbtEvent]) -> None:
        """Append one line per event, then flush and fsync (call once per round)."""
        if not events:
            return
        payload = "".join(
            json.dumps(event.to_json_dict(), sort_keys=True, allow_nan=False) + "\n"
            for event in events
        ).encode("utf-8")
        created = not self.path.exists()
        if created:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as file:
            size = file.seek(0, os.SEEK_END)
            if size > 0:
                file.seek(size - 1)
                if file.read(1) != b"\n":
                    # A torn line from a crash: end it so it cannot swallow our first event.
                    payload = b"\n" + payload
            file.write(payload)  # "a" mode: always written at the end
            file.flush()
            os.fsync(file.fileno())
        if created:
            _fsync_directory(self.path.parent)

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[PbtEvent]:
        """All events in the file at ``path``, oldest first; ``[]`` if it does not exist.

        Lines that are not valid events (torn by a crash) are skipped with a warning.
        """
        path = Path(path)
        if not path.exists():
            return []
        events = []
        with open(path, encoding="utf-8") as file:
            for line_number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    events.append(PbtEvent.from_json_dict(json.loads(line)))
                except (ValueError, KeyError, TypeError) as error:
                    warnings.warn(
                        f"{path}:{line_number}: skipping unreadable PBT event ({error})",
                        stacklevel=2,
                    )
        return events


def _fsync_directory(directory: Path) -> None:
    """Make a newly created file's directory entry durable (POSIX only; best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # e.g. Windows cannot open directories
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
