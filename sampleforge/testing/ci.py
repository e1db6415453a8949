"""Tests that need something this machine may lack: skip on a developer's machine, fail in CI.

CI (`.ci/run`, run with CI=true) installs everything these tests need, so a missing tool there
means a check silently stopped running: that must turn CI red, not into a skip.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test for `reason`, or fail it when running in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must be able to run this test: {reason}")
    pytest.skip(reason)
