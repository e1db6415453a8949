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
    host.start(
        ComponentSpec(
            "probe", _ReportEnvironment, {"keys": keys, "out": out}, control_queue=make_queue()
        )
    )
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


_STDIN_SCRIPT = """
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
with Runner(make_config(env="CartPole-v1", train_dir={train_dir!r}, experiment="e",
                        train_for_env_steps=2000)) as runner:
    runner.train()
"""


@pytest.mark.timeout(120)
def test_a_script_read_from_stdin_is_refused_before_anything_starts(tmp_path):
    import subprocess
    import sys

    train_dir = tmp_path / "train_dir"
    result = subprocess.run(
        [sys.executable, "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        input=_STDIN_SCRIPT.format(train_dir=str(train_dir)),
        timeout=100,
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert "script read from <stdin>" in last_line and "serial_mode=True" in last_line
    assert "died" not in result.stderr  # refused up front, not after the workers failed
    assert not train_dir.exists()  # nothing was written


def test_a_script_file_can_spawn():
    from sampleforge.comms.hosts import spawn_problem

    assert spawn_problem() is None  # pytest's own __main__ is a real file
