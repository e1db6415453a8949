"""A local Ray for the tests that run searches: 2 CPUs (CI's machine), no dashboard, its
session folder in a private temp folder removed afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
