"""sampleforge: asynchronous reinforcement learning on one machine (Sample Factory architecture).

    from sampleforge import APPO          # also IMPALA, A3C, DQN, Rainbow, QRDQN, IQN, FQF,
                                          # MDQN, PQN, DDPG, TD3, SAC, CrossQ; docs/api.md

The algorithm classes are imported on first use, so `import sampleforge.config` and the CLI's
start-up stay light (no torch import for `sampleforge --help`).
"""

from __future__ import annotations

from typing import Any

_API_NAMES = (
    "APPO",
    "IMPALA",
    "A3C",
    "DQN",
    "Rainbow",
    "QRDQN",
    "IQN",
    "FQF",
    "MDQN",
    "PQN",
    "DDPG",
    "TD3",
    "SAC",
    "CrossQ",
)

__all__ = list(_API_NAMES)


def __getattr__(name: str) -> Any:
    if name in _API_NAMES:
        from sampleforge import api

        return getattr(api, name)
    raise AttributeError(f"module 'sampleforge' has no attribute {name!r}")
