"""`worker_cpu_affinity` is refused, in one line, where it cannot work: on a platform without
`sched_setaffinity` (macOS, Windows) and in serial mode (no worker processes to pin)."""

from __future__ import annotations

import os

import pytest

from sampleforge.config import ConfigError, make_config


def test_off_by_default_and_accepted_on_linux():
    assert make_config().worker_cpu_affinity is False
    if hasattr(os, "sched_setaffinity"):
        assert make_config(worker_cpu_affinity=True).worker_cpu_affinity is True


def test_refused_in_one_line_on_a_platform_without_sched_setaffinity(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(ConfigError) as refused:
        make_config(worker_cpu_affinity=True)
    message = str(refused.value)
    assert "\n" not in message
    assert "worker_cpu_affinity true needs os.sched_setaffinity" in message
    make_config(worker_cpu_affinity=False)  # the default stays valid there


def test_refused_in_one_line_in_serial_mode():
    with pytest.raises(ConfigError) as refused:
        make_config(worker_cpu_affinity=True, serial_mode=True)
    assert "\n" not in str(refused.value)
    assert "serial_mode true runs none" in str(refused.value)
