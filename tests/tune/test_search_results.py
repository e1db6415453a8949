"""A search's table says which trials finished: an interrupted search is not all 'done'."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("ray.tune", reason="the ray extra is not installed")

from sampleforge.tune.search import _row  # noqa: E402


def result(metrics, error=None):
    return types.SimpleNamespace(metrics=metrics, config={}, error=error)


@pytest.mark.parametrize(
    "metrics, error, status",
    [
        ({"env_steps": 1000, "trial_id": "a"}, None, "done"),
        ({"env_steps": 400, "trial_id": "b", "done": True}, None, "done"),  # its return reached
        ({"env_steps": 400, "trial_id": "c"}, None, "unfinished"),  # interrupted
        ({}, None, "unfinished"),  # never started
        ({"env_steps": 400, "trial_id": "d"}, RuntimeError("x"), "error"),
    ],
)
def test_a_trials_status_comes_from_what_it_trained(metrics, error, status):
    assert _row(result(metrics, error), [], trial_env_steps=1000)["status"] == status
