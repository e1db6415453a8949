"""Populations and searches on Ray Tune: every trial is one sampleforge run driven through the
Python API (`sampleforge tune`, docs/distributed.md).

    from sampleforge.tune import SampleforgeTrainable, SearchSpec, run_search

Layout: `trainable.py` the Ray Tune trainable (one `Algorithm` per trial, trained
`env_steps_per_iteration` env steps per Tune iteration); `state.py` what a Ray checkpoint holds
(the newest sampleforge checkpoint of each policy and the run's config.json) and the checksums
that show a copy is exact; `resources.py` what a trial asks Ray for; `search.py` the grid,
random and PBT searches and their result table.

Ray is an optional extra (`pip install -e '.[ray]'`): `require_ray` turns its absence into a
one-line error. Importing this package imports neither Ray nor torch; its names load on first
use.

Must not: compute anything about learning, or reach into a run other than through the Python
API and the experiment folder's files.
"""

from __future__ import annotations

import importlib
from typing import Any

RAY_MISSING = (
    "Ray Tune is not installed: install the ray extra with pip install -e '.[ray]' "
    "(or pip install 'ray[tune]>=2.40')"
)

# name -> the module that defines it, imported on first use (Ray and torch are heavy).
_LAZY = {
    "SampleforgeTrainable": "sampleforge.tune.trainable",
    "SearchSpec": "sampleforge.tune.search",
    "run_search": "sampleforge.tune.search",
    "component_processes": "sampleforge.tune.resources",
    "trial_resources": "sampleforge.tune.resources",
}

__all__ = ["RAY_MISSING", "RayMissingError", "require_ray", *_LAZY]


class RayMissingError(ImportError):
    """Ray Tune is not installed; the message says how to install it."""


def require_ray() -> None:
    """Raise RayMissingError (one line: how to install the extra) unless Ray Tune imports."""
    try:
        importlib.import_module("ray.tune")
    except ImportError:
        raise RayMissingError(RAY_MISSING) from None


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sampleforge.tune' has no attribute {name!r}")
