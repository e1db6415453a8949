"""Durable, atomic, checksummed checkpoints for one policy.

Responsibility: put a learner's state on disk so that a crash at any instant
leaves either the old set of checkpoints or the old set plus one complete new
checkpoint, never a half-written file that looks valid; find the newest
*usable* checkpoint again on resume; keep the best-scoring one (a copy, or the
part of its state the caller names, such as all but a saved replay).

Layout of ``<experiment_dir>/checkpoints/p<policy_id>/`` (see
:func:`policy_checkpoint_dir`)::

    checkpoint_<policy_version:09d>_<env_steps>.pt         torch.save'd state
    checkpoint_<policy_version:09d>_<env_steps>.pt.sha256  "<hex>  <name>"
    best.pt, best.pt.sha256, best.json                      best mean return
    .<name>.<random>.tmp                                    in-flight writes

What this module must not do: decide *when* to checkpoint or *what* goes in
the state (the learner owns that), touch other policies' folders, execute code
from a file (loading is ``weights_only=True``), or silently start from scratch
when checkpoints exist but none can be read.

State restrictions: because files are loaded with ``weights_only=True`` the
state must contain only tensors, ``bool``/``int``/``float``/``str``/``None``,
``torch.dtype``/``torch.device``/``torch.Size``, and ``dict``/``list``/``tuple``
of those (module and optimizer ``state_dict()`` outputs qualify). ``save``
checks this before writing anything; convert numpy values with ``float()`` /
``torch.as_tensor`` and configs with ``dataclasses.asdict``. The key
``"format_version"`` is reserved and set by :meth:`CheckpointStore.save`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pickle
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import torch

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "CheckpointVersionError",
    "checkpoint_info",
    "policy_checkpoint_dir",
]

CHECKPOINT_FORMAT_VERSION = 1
"""Version of the on-disk state layout; bump when a saved key changes meaning."""

FORMAT_VERSION_KEY = "format_version"
BEST_NAME = "best.pt"
BEST_INFO_NAME = "best.json"
CHECKSUM_SUFFIX = ".sha256"
TEMP_SUFFIX = ".tmp"

_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
_HASH_CHUNK = 1 << 20
# Leaf types torch.load(weights_only=True) accepts without extra allow-listing.
_PLAIN_LEAVES = (bool, int, float, str, type(None), torch.Tensor, torch.dtype, torch.device)

T = TypeVar("T")  # what `_newest_usable` makes of a checkpoint


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, verified or loaded."""


class CheckpointVersionError(CheckpointError):
    """A checkpoint was written by a newer format than this code understands.

    Not treated as corruption: :meth:`CheckpointStore.load_latest` raises it
    instead of falling back to an older file, because silently resuming from
    stale progress would hide a version mismatch the user must resolve.
    """


def policy_checkpoint_dir(experiment_dir: Path, policy_id: int) -> Path:
    """Return ``<experiment_dir>/checkpoints/p<policy_id>``, the store folder."""
    return Path(experiment_dir) / "checkpoints" / f"p{policy_id}"


def checkpoint_info(path: Path) -> tuple[int, int]:
    """Return ``(policy_version, env_steps)`` parsed from a checkpoint file name.

    Raises ``ValueError`` for names that are not ``checkpoint_<v>_<steps>.pt``.
    """
    match = _CHECKPOINT_RE.match(Path(path).name)
    if match is None:
        raise ValueError(f"not a checkpoint file name: {Path(path).name!r}")
    return int(match.group(1)), int(match.group(2))


class CheckpointStore:
    """Atomic checkpoint folder for one policy with pruning and best tracking.

    One store (one process) should write a given folder; readers may run
    concurrently because every file appears via an atomic ``os.replace``.
    """

    def __init__(self, directory: Path, keep_last: int = 3) -> None:
        """Manage ``directory``; keep at most ``keep_last`` numbered checkpoints.

        The folder is created lazily by the first :meth:`save`, so a store for
        an experiment that never saved does not leave empty folders behind.
        """
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self._best_mean_return = self._read_best_mean_return()

    @property
    def best_mean_return(self) -> float | None:
        """Best ``mean_return`` saved so far (survives restarts via best.json)."""
        return self._best_mean_return

    @property
    def best_path(self) -> Path:
        """Path of the best checkpoint copy (may not exist yet)."""
        return self.directory / BEST_NAME

    # ------------------------------------------------------------------ save

    def save(
        self,
        state: dict,
        *,
        env_steps: int,
        policy_version: int,
        mean_return: float | None = None,
        best_state: dict | None = None,
    ) -> Path:
        """Atomically write ``state`` as a new checkpoint and return its path.

        ``state`` must hold only plain data (see the module docstring); a
        ``"format_version"`` key is added. If ``mean_return`` is finite and
        beats :attr:`best_mean_return`, ``best.pt`` and ``best.json`` are
        updated too: ``best.pt`` holds ``best_state`` when given (a part of
        ``state`` worth keeping with the score, such as all but a saved
        replay), else a copy of the checkpoint. Old checkpoints beyond
        ``keep_last`` and stale temp files are removed only after everything
        above succeeded.
        """
        if env_steps < 0 or policy_version < 0:
            raise ValueError("env_steps and policy_version must be non-negative")
        payload = _with_format_version(state)
        _check_plain_data(payload, "state")
        new_best = mean_return is not None and _is_new_best(mean_return, self._best_mean_return)
        best_payload = None
        if new_best and best_state is not None:
            best_payload = _with_format_version(best_state)
            _check_plain_data(best_payload, "best_state")
        self.directory.mkdir(parents=True, exist_ok=True)

        path = self.directory / f"checkpoint_{policy_version:09d}_{env_steps}.pt"
        self._write_verified(path, lambda f: torch.save(payload, f))
        if new_best:
            assert mean_return is not None
            self._write_best(
                path, best_payload, mean_return, env_steps=env_steps, version=policy_version
            )
        self._prune(keep=path)
        return path

    def _write_verified(self, path: Path, write: Callable[[BinaryIO], None]) -> None:
        """Write a file plus its checksum sidecar, each atomically.

        The sidecar lands first so that every visible ``.pt`` already has its
        checksum; a crash in between leaves only an orphan sidecar, which
        listing ignores and the next save removes.
        """
        with _atomic_target(path) as tmp:
            with open(tmp, "wb") as f:
                write(f)
                _flush_and_sync(f)
            digest = sha256_file(tmp)
            # When overwriting (best.pt), the sidecar briefly accepts old and new
            # digests so the visible file verifies at every instant.
            previous = _previous_digests(path)
            _write_sidecar(path, [digest, *previous])
            os.replace(tmp, path)
            if previous:
                _write_sidecar(path, [digest])
        _fsync_dir(self.directory)

    def _write_best(
        self,
        source: Path,
        payload: dict | None,
        mean_return: float,
        *,
        env_steps: int,
        version: int,
    ) -> None:
        """Write ``payload`` (None: a copy of the checkpoint ``source``) to best.pt and
        record its score in best.json."""

        def copy(f: BinaryIO) -> None:
            with open(source, "rb") as src:
                while chunk := src.read(_HASH_CHUNK):
                    f.write(chunk)

        def write(f: BinaryIO) -> None:
            torch.save(payload, f)

        self._write_verified(self.best_path, copy if payload is None else write)
        info = {
            "mean_return": float(mean_return),
            "env_steps": env_steps,
            "policy_version": version,
            "checkpoint": source.name,
        }
        _atomic_write_bytes(self.directory / BEST_INFO_NAME, json.dumps(info, indent=2).encode())
        _fsync_dir(self.directory)
        self._best_mean_return = float(mean_return)

    def _prune(self, keep: Path) -> None:
        """Delete checkpoints beyond ``keep_last``, stale temps and orphan sidecars.

        ``keep`` (the file just written) is never deleted even if its version
        sorts older, e.g. after a restart with a reset version counter.
        """
        checkpoints = self.list()
        excess = max(0, len(checkpoints) - self.keep_last)
        for old in checkpoints[:excess]:
            if old != keep:
                # The .pt goes first so a crash never leaves a .pt without its sidecar.
                old.unlink(missing_ok=True)
                _sidecar(old).unlink(missing_ok=True)
        for stale in self.directory.glob(f".*{TEMP_SUFFIX}"):
            stale.unlink(missing_ok=True)
        for sidecar in self.directory.glob(f"*.pt{CHECKSUM_SUFFIX}"):
            if not sidecar.with_suffix("").exists():
                sidecar.unlink(missing_ok=True)

    # ---------------------------------------------------------------- query

    def list(self) -> list[Path]:
        """Numbered checkpoints, oldest to newest by (policy_version, env_steps).

        Temp files, sidecars and ``best.pt`` are not included.
        """
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if _CHECKPOINT_RE.match(p.name)]
        return sorted(found, key=checkpoint_info)

    def latest(self) -> Path | None:
        """Newest numbered checkpoint, or None. Not verified; see load_latest."""
        checkpoints = self.list()
        return checkpoints[-1] if checkpoints else None

    def latest_verified(self) -> Path | None:
        """The newest checkpoint whose checksum verifies, skipping the others with a
        ``RuntimeWarning`` as ``load_latest`` does, without loading it. None when there are
        none at all; :class:`CheckpointError` when none verifies."""
        found = self._newest_usable(_verify_checksum)
        return None if found is None else found[1]

    # ----------------------------------------------------------------- load

    def load_latest(self, map_location: Any = "cpu") -> tuple[dict, Path] | None:
        """Load the newest checkpoint that verifies, newest first.

        Corrupt or unreadable files are skipped with a ``RuntimeWarning`` that
        names each skipped file and the checkpoint used instead. Returns None
        only when there are no checkpoints at all; raises
        :class:`CheckpointError` when checkpoints exist but none is usable, and
        :class:`CheckpointVersionError` on a newer format (never skipped).
        """
        return self._newest_usable(lambda path: self.load(path, map_location=map_location))

    def _newest_usable(self, use: Callable[[Path], T]) -> tuple[T, Path] | None:
        """`use` of the newest checkpoint it does not refuse with a CheckpointError (a
        CheckpointVersionError is never skipped), and that checkpoint."""
        candidates = self.list()
        if not candidates:
            return None
        skipped: list[tuple[Path, CheckpointError]] = []
        for path in reversed(candidates):
            try:
                result = use(path)
            except CheckpointVersionError:
                raise
            except CheckpointError as err:
                skipped.append((path, err))
                continue
            for bad, reason in skipped:
                warnings.warn(
                    f"skipping unusable checkpoint {bad} ({reason}); falling back to {path.name}",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return result, path
        details = "; ".join(f"{p.name}: {e}" for p, e in skipped)
        raise CheckpointError(
            f"all {len(skipped)} checkpoints in {self.directory} are unusable: {details}"
        )

    def load(self, path: Path, map_location: Any = "cpu") -> dict:
        """Verify the checksum of ``path`` and load it with ``weights_only=True``.

        Raises :class:`CheckpointError` when the sidecar is missing or does not
        match, the file is unreadable, or it contains pickled objects other
        than plain data (such files are refused, never executed); raises
        :class:`CheckpointVersionError` for a newer ``format_version``.
        """
        path = Path(path)
        _verify_checksum(path)
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            raise CheckpointError(
                f"refusing {path.name}: it is corrupt or contains pickled objects "
                f"that are not plain data ({_first_line(err)})"
            ) from err
        except Exception as err:  # torch reports corrupt archives with assorted types
            raise CheckpointError(f"cannot load {path.name}: {_first_line(err)}") from err
        _check_format_version(state, path)
        return state

    # -------------------------------------------------------------- helpers

    def _read_best_mean_return(self) -> float | None:
        info_path = self.directory / BEST_INFO_NAME
        if not info_path.exists():
            return None
        try:
            return float(json.loads(info_path.read_text())["mean_return"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            # A lost best score only means best.pt may be replaced by a worse run.
            warnings.warn(f"ignoring unreadable {info_path}: {err}", RuntimeWarning, stacklevel=3)
            return None


# ---------------------------------------------------------------- functions


def _with_format_version(state: dict) -> dict:
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    payload = dict(state)
    payload[FORMAT_VERSION_KEY] = CHECKPOINT_FORMAT_VERSION
    return payload


def _check_plain_data(value: Any, where: str) -> None:
    """Raise CheckpointError naming the first value weights_only loading would refuse.

    Checked before writing so an unloadable checkpoint is never produced
    (discovering it at resume time would lose the run).
    """
    if isinstance(value, _PLAIN_LEAVES) or type(value) is torch.Size:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise CheckpointError(f"{where}: key {key!r} must be str or int")
            _check_plain_data(item, f"{where}[{key!r}]")
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain_data(item, f"{where}[{i}]")
        return
    raise CheckpointError(
        f"{where}: {type(value).__module__}.{type(value).__qualname__} cannot be checkpointed; "
        "use tensors, numbers, strings, lists or dicts (e.g. float(x), torch.as_tensor(a))"
    )


def _is_new_best(mean_return: float, best: float | None) -> bool:
    if not math.isfinite(mean_return):
        return False
    return best is None or mean_return > best


def _check_format_version(state: Any, path: Path) -> None:
    if not isinstance(state, dict) or FORMAT_VERSION_KEY not in state:
        raise CheckpointError(
            f"{path.name} is not a sampleforge checkpoint (no {FORMAT_VERSION_KEY})"
        )
    version = state[FORMAT_VERSION_KEY]
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{path.name} has a malformed {FORMAT_VERSION_KEY}: {version!r}")
    if version > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointVersionError(
            f"{path.name} has format_version {version}, newer than supported "
            f"format_version {CHECKPOINT_FORMAT_VERSION}; upgrade sampleforge to load it"
        )


def _verify_checksum(path: Path) -> None:
    try:
        expected = _read_digests(path)
    except OSError as err:
        raise CheckpointError(f"missing checksum file {_sidecar(path).name}: {err}") from err
    if not expected:
        raise CheckpointError(f"empty checksum file {_sidecar(path).name}")
    try:
        actual = sha256_file(path)
    except OSError as err:
        raise CheckpointError(f"cannot read {path.name}: {err}") from err
    if actual not in expected:
        raise CheckpointError(f"checksum mismatch for {path.name} (file is corrupt)")


def _read_digests(path: Path) -> list[str]:
    """Digests listed in the sidecar of ``path`` (``sha256sum`` line format)."""
    lines = _sidecar(path).read_text().splitlines()
    return [line.split()[0].lower() for line in lines if line.strip()]


def _previous_digests(path: Path) -> list[str]:
    """Digests of the file about to be overwritten; [] if there is none or it is unreadable."""
    if not path.exists():
        return []
    try:
        return _read_digests(path)
    except OSError:
        return []


def _write_sidecar(path: Path, digests: list[str]) -> None:
    text = "".join(f"{digest}  {path.name}\n" for digest in digests)
    _atomic_write_bytes(_sidecar(path), text.encode())


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file at `path`, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _atomic_target(path: Path) -> Iterator[Path]:
    """Yield a temp path next to ``path``; remove it if the block fails.

    The temp file is in the same folder so ``os.replace`` is a same-filesystem
    atomic rename; its dot-prefix and suffix keep it out of :meth:`list`.
    """
    # Not tempfile.mkstemp: its 0600 mode would stick to the final file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")
    tmp.touch(exist_ok=False)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)  # no-op after a successful os.replace


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    with _atomic_target(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            _flush_and_sync(f)
        os.replace(tmp, path)


def _flush_and_sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself; POSIX only (Windows cannot open directories)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
