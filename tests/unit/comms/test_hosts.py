"""ProcessHost (comms/hosts.py): what child processes start with."""

import os
import signal
import subprocess
import sys
import time
from multiprocessing import forkserver

import pytest

from sampleforge.comms.hosts import (
    CHILD_ENVIRONMENT,
    SPINNING_CHILD_ENVIRONMENT,
    ComponentSpec,
    ProcessHost,
)
from sampleforge.comms.queues import make_queue
from sampleforge.testing.processes import gone_within, is_alive


class _ReportEnvironment:
    """A component that reports the variables it started with (and its parent's pid under
    "ppid"), writes `say` to its stderr, then stops."""

    def __init__(self, keys, out, say=""):
        self.name = "probe"
        self.running = True
        print(say, file=sys.stderr, flush=True)
        out.put({key: os.environ.get(key) for key in keys} | {"ppid": os.getppid()})

    def poll(self, timeout):
        self.running = False

    def close(self):
        pass


def _child_sees(keys, say="", threads_spin=False):
    """Start the probe; returns what it saw and whether it was forked from the fork server
    (else it was spawned, as our own child)."""
    reports, out = make_queue(), make_queue()
    host = ProcessHost(reports)
    kwargs = {"keys": keys, "out": out, "say": say}
    spec = ComponentSpec(
        "probe", _ReportEnvironment, kwargs, control_queue=make_queue(), threads_spin=threads_spin
    )
    host.start(spec)
    try:
        seen = out.get(timeout=60)
    finally:
        assert host.join_all(30) == []
    parent = seen.pop("ppid")
    assert parent in (os.getpid(), forkserver._forkserver._forkserver_pid)
    return seen, parent != os.getpid()


def _load_time_variables_now():
    from sampleforge.comms import hosts

    return hosts._load_time_variables(), hosts._fork_server_variables()


@pytest.fixture(scope="module")
def fork_server():
    """The fork server, started before any test's own output capture (and with the
    environment as it is here)."""
    _child_sees([])


@pytest.mark.timeout(120)
def test_children_start_with_openmp_threads_that_sleep_instead_of_spinning(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _child_sees(["OMP_WAIT_POLICY"])[0] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert "OMP_WAIT_POLICY" not in os.environ  # the caller's environment is left as it was
    assert set(CHILD_ENVIRONMENT) == {"OMP_WAIT_POLICY"}


@pytest.mark.timeout(120)
def test_a_spinning_child_s_threads_wait_before_they_sleep(fork_server, monkeypatch):
    keys = ["OMP_WAIT_POLICY", *SPINNING_CHILD_ENVIRONMENT]
    for key in keys:
        monkeypatch.delenv(key, raising=False)
    seen, forked = _child_sees(keys, threads_spin=True)
    assert seen == {"OMP_WAIT_POLICY": None, **SPINNING_CHILD_ENVIRONMENT}
    # Its OpenMP reads them as it loads: the fork server loaded it with the sleeping ones.
    assert not forked
    assert all(key not in os.environ for key in keys)
    assert _child_sees(keys)[0] == {key: None for key in SPINNING_CHILD_ENVIRONMENT} | {
        "OMP_WAIT_POLICY": "PASSIVE"
    }


# A fresh program whose first child spins: which of its children forked from the fork server.
_SPINNING_FIRST = """
import os, sys
from multiprocessing import forkserver
from sampleforge.comms.hosts import WAIT_VARIABLES, ComponentSpec, ProcessHost
from sampleforge.comms.queues import make_queue

class Report:
    def __init__(self, out):
        self.name, self.running = "probe", True
        out.put((os.getppid(), os.environ.get("OMP_WAIT_POLICY")))
    def poll(self, timeout):
        self.running = False
    def close(self):
        pass

if __name__ == "__main__":
    for key in WAIT_VARIABLES:
        os.environ.pop(key, None)
    for spin in (True, False):
        host, out = ProcessHost(make_queue()), make_queue()
        host.start(ComponentSpec("probe", Report, {"out": out}, make_queue(), threads_spin=spin))
        parent, policy = out.get(timeout=60)
        assert host.join_all(30) == []
        print("child:", spin, parent == forkserver._forkserver._forkserver_pid, policy)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
@pytest.mark.timeout(180)
def test_a_spinning_first_child_does_not_start_the_fork_server_with_its_settings(tmp_path):
    script = tmp_path / "spinning_first.py"
    script.write_text(_SPINNING_FIRST)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=150
    )
    assert result.returncode == 0, result.stderr
    # Spawned with its own settings; then the sleeping child forks from the server.
    children = [line for line in result.stdout.splitlines() if line.startswith("child: ")]
    assert children == ["child: True False None", "child: False True PASSIVE"]


@pytest.mark.timeout(120)
def test_a_users_own_setting_wins(fork_server, monkeypatch):
    # The server first, with this process's own settings: started under ACTIVE, it would spawn
    # every later test's children (their settings would differ from its).
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _child_sees(["OMP_WAIT_POLICY"])[0] == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    # Also for a spinning child: an explicit spin count would override the user's policy.
    keys = ["OMP_WAIT_POLICY", *SPINNING_CHILD_ENVIRONMENT]
    for key in SPINNING_CHILD_ENVIRONMENT:
        monkeypatch.delenv(key, raising=False)
    seen = _child_sees(keys, threads_spin=True)[0]
    assert seen == {"OMP_WAIT_POLICY": "ACTIVE"} | {key: None for key in SPINNING_CHILD_ENVIRONMENT}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
@pytest.mark.timeout(120)
def test_a_forked_child_gets_the_callers_environment_and_stderr_as_they_are_now(
    fork_server, monkeypatch, capfd
):
    # The server was started before this test set the variable and captured stderr: a child
    # with the server's own would see neither.
    monkeypatch.setenv("SAMPLEFORGE_PROBE", "set after the server started")
    seen, forked = _child_sees(["SAMPLEFORGE_PROBE"], say="probe on stderr")
    assert forked, f"spawned; variables now and the server's: {_load_time_variables_now()}"
    assert seen == {"SAMPLEFORGE_PROBE": "set after the server started"}
    assert "probe on stderr" in capfd.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
@pytest.mark.timeout(120)
def test_a_child_whose_openmp_settings_differ_from_the_servers_is_spawned(fork_server, monkeypatch):
    # OpenMP read them when the server loaded torch: a forked child could not change them.
    monkeypatch.setenv("OMP_NUM_THREADS", str(os.getpid()))  # surely not the server's
    seen, forked = _child_sees(["OMP_NUM_THREADS"])
    assert not forked
    assert seen == {"OMP_NUM_THREADS": str(os.getpid())}


_STDIN_SCRIPT = """
from sampleforge.components.runner import Runner
from sampleforge.config import make_config
with Runner(make_config(env="CartPole-v1", train_dir={train_dir!r}, experiment="e",
                        train_for_env_steps=2000)) as runner:
    runner.train()
"""


@pytest.mark.timeout(120)
def test_a_script_read_from_stdin_is_refused_before_anything_starts(tmp_path):
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
@pytest.mark.timeout(120)
def test_a_child_with_more_descriptors_than_the_server_takes_is_spawned(fork_server, monkeypatch):
    monkeypatch.setattr(forkserver, "MAXFDS_TO_SEND", 8)  # a probe passes more than 4
    seen, forked = _child_sees(["HOME"])
    assert not forked
    assert seen == {"HOME": os.environ.get("HOME")}


class _StartsAHelper:
    """A component that starts a helper process (as a ViZDoom env starts its engine), reports
    its own pid, process group and the helper's pid, then runs until it is killed."""

    def __init__(self, out):
        self.name = "helper_owner"
        self.running = True
        helper = subprocess.Popen(["sleep", "600"])
        out.put({"pid": os.getpid(), "group": os.getpgid(0), "helper": helper.pid})

    def poll(self, timeout):
        time.sleep(timeout)

    def close(self):
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["killed_from_outside", "killed_by_the_host"])
def test_a_dead_components_helpers_die_with_it(how):
    reports, out = make_queue(), make_queue()
    host = ProcessHost(reports)
    host.start(ComponentSpec("helper_owner", _StartsAHelper, {"out": out}, make_queue()))
    seen = out.get(timeout=60)
    try:
        assert seen["group"] == seen["pid"] != os.getpgid(0)  # a group of its own
        if how == "killed_from_outside":  # a segfault or the OOM killer: the host only sees it
            os.kill(seen["pid"], signal.SIGKILL)
        else:  # the supervisor's kill of a hung worker
            host.kill("helper_owner")
        assert gone_within([seen["helper"]], 5.0), "the helper outlived its component"
    finally:
        host.kill_all()
        if not gone_within([seen["helper"]], 0):
            os.kill(seen["helper"], signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server on Linux only")
def test_the_fork_server_leads_a_process_group_of_its_own(fork_server):
    # A SIGTERM to the caller's group must not kill it, and every component with it.
    server = forkserver._forkserver._forkserver_pid
    assert os.getpgid(server) == server != os.getpgid(0)


class _RunsUntilKilled:
    """A component that reports its pid, then polls for ever and never reads a stop message
    (a hung one, to the host)."""

    def __init__(self, out):
        self.name = "stubborn"
        self.running = True
        out.put(os.getpid())

    def poll(self, timeout):
        time.sleep(timeout)

    def close(self):
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
def test_children_live_through_sigterm_and_the_host_still_ends_a_hung_one():
    # `systemctl stop` or a scheduler SIGTERMs every process of a run: the component, its fork
    # server and the group guard must leave the decision to the runner (a learner killed by it
    # would lose the final checkpoint; a guard, the clean-up after a runner that dies later).
    reports, out = make_queue(), make_queue()
    host = ProcessHost(reports)
    host.start(ComponentSpec("stubborn", _RunsUntilKilled, {"out": out}, make_queue()))
    try:
        pid = out.get(timeout=60)
        server = forkserver._forkserver._forkserver_pid
        guard = host._guard._process.pid
        for target in (pid, server, guard):
            os.kill(target, signal.SIGTERM)
        time.sleep(1.0)
        for target, what in ((pid, "component"), (server, "fork server"), (guard, "guard")):
            assert is_alive(target), f"the {what} died of SIGTERM"
        # The host's own escalation still ends a component that does not stop.
        t0 = time.monotonic()
        assert host.join_all(0.5) == ["stubborn"]
        assert gone_within([pid], 0.0) and time.monotonic() - t0 < 3.0
        assert host.dead()["stubborn"] == -signal.SIGKILL
        assert gone_within([guard], 5.0), "the guard outlived its host"
    finally:
        host.kill_all()


def _fork_and_terminate(out):
    """In a component process: an env forks a helper, and later ends it with SIGTERM."""
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(ready_w, b"!")  # it runs: its fork handlers have run
        time.sleep(600)
        os._exit(0)
    os.read(ready_r, 1)
    os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            out.put(os.waitstatus_to_exitcode(status))
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    out.put("lived through SIGTERM")


class _ForksAWorker:
    def __init__(self, out):
        self.name = "forker"
        self.running = True
        _fork_and_terminate(out)

    def poll(self, timeout):
        self.running = False

    def close(self):
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")
@pytest.mark.timeout(120)
def test_a_process_a_component_forks_can_still_be_terminated():
    # The component lives through SIGTERM; what it forks must not inherit that, or an env that
    # ends its helper with SIGTERM would wait for it for ever.
    reports, out = make_queue(), make_queue()
    host = ProcessHost(reports)
    host.start(ComponentSpec("forker", _ForksAWorker, {"out": out}, make_queue()))
    try:
        assert out.get(timeout=60) == -signal.SIGTERM
    finally:
        assert host.join_all(30) == []
