"""ProcessHost (comms/hosts.py): what child processes start with."""

import os

import pytest

from sampleforge.comms.hosts import CHILD_ENVIRONMENT, ComponentSpec, ProcessHost
from sampleforge.comms.queues import make_queue


class _ReportEnvironment:
    """A component that reports the variables it started with, then stops."""

    def __init__(self, keys, out):
        self.name = "probe"
        self.running = True
        out.put({key: os.environ.get(key) for key in keys})

    def poll(self, timeout):
        self.running = False

    def close(self):
        pass


def _child_sees(keys):
    reports, out = make_queue(), make_queue()
    host = ProcessHost(reports)
    host.start(ComponentSpec("probe", _ReportEnvironment, {"keys": keys, "out": out},
                             control_queue=make_queue()))
    try:
        return out.get(timeout=60)
    finally:
        assert host.join_all(30) == []


@pytest.mark.timeout(120)
def test_children_start_with_openmp_threads_that_sleep_instead_of_spinning(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _child_sees(["OMP_WAIT_POLICY"]) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert "OMP_WAIT_POLICY" not in os.environ  # the caller's environment is left as it was
    assert set(CHILD_ENVIRONMENT) == {"OMP_WAIT_POLICY"}


@pytest.mark.timeout(120)
def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _child_sees(["OMP_WAIT_POLICY"]) == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
