"""Checkpointing: durable, atomic, checksummed learner state on disk.

Responsibility: re-export the public API of :mod:`sampleforge.checkpoint.store`.
Must not: decide checkpoint timing or content (the learner/runner does).
"""

from sampleforge.checkpoint.store import (
    CHECKPOINT_FORMAT_VERSION,
    CheckpointError,
    CheckpointStore,
    CheckpointVersionError,
    checkpoint_info,
    policy_checkpoint_dir,
)

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "CheckpointVersionError",
    "checkpoint_info",
    "policy_checkpoint_dir",
]
