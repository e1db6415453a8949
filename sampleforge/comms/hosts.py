"""Where components run: one process each (`ProcessHost`) or all in the caller (`InlineHost`).

Both take the same `ComponentSpec`s, so serial mode runs exactly the components the
asynchronous mode runs. The process host owns every child process: it notices deaths through
process sentinels, bounds every join, and escalates stop message -> SIGKILL. Not through
SIGTERM: children live through it, because `systemctl stop`, a scheduler or `pkill -s` sends
it to every process of a run, and only the runner may act on it (`comms/interrupts.py`).
SIGTERM never bought a child any cleanup anyway (none handled it: it ended them as abruptly as
SIGKILL); a clean stop is what the stop message asks for.

On Linux the processes fork from multiprocessing's fork server, which imports torch and the
components once; a spawned process would import them again, 2-3 CPU-seconds each. The server
never touches CUDA, so each child starts CUDA for itself, as a spawned one would. What a spawned
child inherits from the caller at its start (environment variables, stdout and stderr) the
forked one gets from the caller too (`component_process.InheritedState`), not from the server.

Each child leads its own process group, which the host kills once the child has ended, and a
`GroupGuard` kills if the caller dies first: no process an env starts outlives its worker
(`group_guard.py`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import wait
from typing import Any, Callable

import torch
import torch.multiprocessing as torch_mp

from sampleforge.comms.component_process import (
    Component,
    InheritedState,
    component_main,
    report_failure,
)
from sampleforge.comms.group_guard import GroupGuard, end_group
from sampleforge.comms.interrupts import signals_deferred
from sampleforge.comms.main_guard import raise_unless_main_guarded
from sampleforge.comms.messages import ComponentStarted

log = logging.getLogger(__name__)

# Settings every child process starts with, unless the user's environment already sets them.
# OpenMP threads (the learner's torch threads) sleep between parallel regions instead of
# spinning: when envs, inference and learning share every core, a spinning thread burns the time
# another component needs (docs/design_notes.md). They are read when a child loads its
# libraries, hence set before it starts rather than inside it.
CHILD_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}

# A child whose threads spin (`ComponentSpec.threads_spin`: a learner that bounds the run and
# has a core to itself): its OpenMP threads wait up to about 30 ms for the next parallel region
# before they sleep. A small model's update is hundreds of short regions, and waking a
# sleeping thread for each cost more than the second thread gave: SAC's update on 2 threads
# made 40 a second asleep, 110 spinning (docs/design_notes.md). GOMP_SPINCOUNT is GNU
# OpenMP's (Linux builds of torch), in busy-wait iterations (about 100,000 a millisecond by
# its own estimate); KMP_BLOCKTIME is LLVM and Intel OpenMP's, in milliseconds.
SPINNING_CHILD_ENVIRONMENT = {"GOMP_SPINCOUNT": "3000000", "KMP_BLOCKTIME": "30"}

# How OpenMP threads wait: a user who sets any of these keeps their own choice whole (an explicit
# spin count or block time overrides the wait policy in both runtimes).
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

# Variables a library reads once, when it loads. Children forked from the fork server loaded
# torch (and its OpenMP) there, with the server's values: a child whose values differ is spawned.
LOAD_TIME_VARIABLE_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_")


@contextmanager
def _child_environment(threads_spin: bool = False):
    settings = SPINNING_CHILD_ENVIRONMENT if threads_spin else CHILD_ENVIRONMENT
    users_own = any(key in os.environ for key in WAIT_VARIABLES)
    added = [] if users_own else list(settings)
    os.environ.update({key: settings[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


@dataclass
class ComponentSpec:
    """How to build one component: `build(**kwargs)` must return a Component."""

    name: str
    build: Callable[..., Component]
    kwargs: dict[str, Any]
    control_queue: Any  # where this component reads Pause / Resume / Stop
    torch_threads: int = 1
    kind: str = ""  # "rollout_worker", "inference_worker", "learner", ...: the supervisor's key
    index: int = 0  # which one of its kind (a rollout worker's index)
    threads_spin: bool = False  # its OpenMP threads spin before they sleep (see above)


def spawn_problem() -> str | None:
    """Why spawned processes could not start from this program, or None.

    A spawned child re-imports the parent's ``__main__`` from its file. A script read from
    standard input (``python - < train.py``) has no file to re-import, so every child would
    die at start-up with an unrelated error.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)  # none: an interactive session or `python -c`
    if path is None or os.path.exists(path):
        return None
    return (
        f"worker processes cannot start from a script read from {path}: save it to a file "
        "and run `python that_file.py`, or pass serial_mode=True"
    )


class ProcessHost:
    """Runs each component in its own spawned process.

    `on_exit(name, pid)`, if given, is called once for every process that ends, from a watcher
    thread, within a fraction of a second: even while the caller's own thread is blocked (for
    example on a queue lock the dead process still holds, see `comms.queue_locks`).
    """

    def __init__(
        self,
        report_queue,
        on_exit: Callable[[str, int], None] | None = None,
        preload: Sequence[str] = ("torch",),
    ):
        self.report_queue = report_queue
        self._spawn = torch_mp.get_context("spawn")  # safe with CUDA and threads
        self._fork_server = _fork_server_context(preload)
        self.processes: dict[str, Any] = {}
        self._on_exit = on_exit
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()  # set: the watcher ends when all have ended
        self._guard: GroupGuard | None = None
        self._ended_groups: set[int] = set()  # each at most once: its number may be reused
        self._groups_lock = threading.RLock()  # the watcher ends groups too; and a 2nd Ctrl-C

    def start(self, spec: ComponentSpec) -> None:
        """Start `spec`'s component; a dead process of the same name is reaped and replaced."""
        old = self.processes.get(spec.name)
        if old is not None:
            old.join(1.0)
            if not old.is_alive():
                self._end_group_of(old)
        args = (spec.name, spec.build, spec.kwargs, self.report_queue, spec.torch_threads)
        if self._guard is None:
            raise_unless_main_guarded(f"starting {spec.name}")
            self._guard = GroupGuard()
        guard = self._guard  # a second Ctrl-C (`kill_all`) may close it meanwhile
        # Deferred: the fork server (if this starts it) and the child choose how to handle
        # SIGINT/SIGTERM before either can reach them.
        with signals_deferred():
            # The server starts with every child's usual settings, whichever child comes
            # first: started for a spinning learner, it would spawn all the others.
            with _child_environment():
                server = None if self._fork_server is None else _fork_server_variables()
            with _child_environment(spec.threads_spin):
                process = self._start_process(spec.name, args, server)
        self.processes[spec.name] = process
        with self._groups_lock:
            self._ended_groups.discard(process.pid)  # a number reused by the new child
        guard.watch(process.pid)  # the child makes its group (pgid = pid) first thing
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._watch_exits, name="exit-watcher", daemon=True
            )
            self._watcher.start()

    def _start_process(self, name: str, args: tuple, server: dict[str, str] | None) -> Any:
        """Fork it from the server (which runs with the load-time variables `server`) where
        that is the same as spawning it, else spawn it."""
        contexts = [self._spawn]
        if self._fork_server is not None and _load_time_variables() == server:
            contexts.insert(0, self._fork_server)
        for context in contexts:
            process = context.Process(
                target=component_main, name=name, daemon=True, args=(*args, InheritedState())
            )
            try:
                process.start()
                return process
            except ValueError as e:  # the server takes at most 256 descriptors (shared tensors)
                if context is self._spawn or "too many fds" not in str(e):
                    raise
        raise AssertionError("unreachable: spawning raises or returns")

    def _end_group_of(self, process: Any) -> None:
        """Kill what is left of an ended child's process group (what its envs started)."""
        with self._groups_lock:
            if process.pid in self._ended_groups:
                return
            self._ended_groups.add(process.pid)
            end_group(process.pid)
            if self._guard is not None:
                self._guard.forget(process.pid)

    def _watch_exits(self) -> None:
        seen: set[int] = set()
        while True:
            running = [p for p in list(self.processes.values()) if p.pid not in seen]
            if not running:
                if self._closing.is_set():
                    return
                time.sleep(0.2)
                continue
            ended = wait([p.sentinel for p in running], timeout=0.2)
            for process in running:
                if process.sentinel in ended:
                    seen.add(process.pid)
                    self._end_group_of(process)
                    if self._on_exit is None:
                        continue
                    try:
                        self._on_exit(process.name, process.pid)
                    except Exception:  # noqa: BLE001 - the runner still sees the death itself
                        log.exception("handling the exit of %s failed", process.name)

    def poll(self, timeout: float) -> None:
        """Nothing to drive: the components run by themselves. Sleeps up to `timeout`."""
        sentinels = [p.sentinel for p in self.processes.values() if p.is_alive()]
        if sentinels and timeout > 0:
            wait(sentinels, timeout=timeout)

    def dead(self) -> dict[str, int]:
        """{name: exit code} of components whose process has ended."""
        return {name: p.exitcode for name, p in self.processes.items() if p.exitcode is not None}

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items()}

    def kill(self, name: str) -> None:
        """SIGKILL one component (a hung one: it cannot be asked to stop)."""
        process = self.processes[name]
        if process.is_alive():
            process.kill()
        process.join(2.0)
        if not process.is_alive():
            self._end_group_of(process)

    def join_all(self, timeout: float) -> list[str]:
        """Wait for every process to exit; SIGKILL the ones that don't (they live through
        SIGTERM, see the module docstring).

        Returns the names of processes that had to be killed.
        """
        forced = []
        self._closing.set()
        deadline = time.monotonic() + timeout
        for name, process in self.processes.items():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                forced.append(name)
                process.kill()
        for name in forced:
            self.processes[name].join(1.0)
        self._end_groups()
        return forced

    def kill_all(self) -> None:
        self._closing.set()
        for process in self.processes.values():
            if process.is_alive():
                process.kill()
        for process in self.processes.values():
            process.join(1.0)
        self._end_groups()

    def _end_groups(self) -> None:
        """After the last join: end every child's group, and let the guard go."""
        for process in self.processes.values():
            if not process.is_alive():
                self._end_group_of(process)
        if self._guard is not None:
            self._guard.close()  # it ends any group still watched: a child that would not die
            self._guard = None


def _load_time_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(LOAD_TIME_VARIABLE_PREFIXES)}


# The load-time variables the fork server started with, by its pid (a restarted one has a new pid).
_fork_server_started_with: dict[int | None, dict[str, str]] = {}


def _fork_server_context(preload: Sequence[str]) -> Any:
    """Multiprocessing's fork server, preloading `preload`; None where there is none to use."""
    if not sys.platform.startswith("linux"):
        return None  # macOS and Windows: spawn, as their multiprocessing advises
    context = torch_mp.get_context("forkserver")
    # "__main__" as multiprocessing's default: a user's script is imported once, in the server.
    context.set_forkserver_preload(["__main__", *preload, "sampleforge.comms.fork_server_group"])
    return context


def _fork_server_variables() -> dict[str, str]:
    """The load-time variables the fork server runs with. Starts it, with the current ones, if
    it is not running (first use, or it died)."""
    server = forkserver._forkserver  # the one server of this process (`ensure_running`'s own)
    server.ensure_running()
    pid = getattr(server, "_forkserver_pid", None)
    if pid not in _fork_server_started_with:
        _fork_server_started_with[pid] = _load_time_variables()
    return _fork_server_started_with[pid]


class InlineHost:
    """Runs every component in the calling process; `poll` gives each one a turn (serial mode)."""

    @staticmethod
    @contextmanager
    def torch_threads():
        """While components run inline: one torch thread, as in their own processes. Their
        small batches gain nothing from more, and on a busy machine torch's thread pool
        synchronising at every op makes small forward passes much slower (docs/design_notes.md)."""
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(previous)

    def __init__(self, report_queue: Any) -> None:
        self.report_queue = report_queue
        self.components: dict[str, Component] = {}
        self._failed: dict[str, int] = {}

    def start(self, spec: ComponentSpec) -> None:
        self._failed.pop(spec.name, None)
        try:
            component = spec.build(**spec.kwargs)
        except Exception as e:  # reported like a failing process, so the runner has one path
            report_failure(self.report_queue, spec.name, e)
            self._failed[spec.name] = 1
            return
        self.components[spec.name] = component
        self.report_queue.put(ComponentStarted(spec.name, os.getpid()))

    def poll(self, timeout: float) -> None:
        for name, component in list(self.components.items()):
            if not component.running:
                continue
            try:
                component.poll(0.0)
            except Exception as e:  # noqa: BLE001 - reported, the runner decides
                report_failure(self.report_queue, name, e)
                self._failed[name] = 1
                component.running = False

    def dead(self) -> dict[str, int]:
        return dict(self._failed)

    def pids(self) -> dict[str, int]:
        return {name: os.getpid() for name in self.components}

    def kill(self, name: str) -> None:
        component = self.components.pop(name)
        component.running = False
        component.close()
        self._failed[name] = -9

    def join_all(self, timeout: float) -> list[str]:
        """Let components handle their Stop message, then close them."""
        deadline = time.monotonic() + timeout
        while any(c.running for c in self.components.values()) and time.monotonic() < deadline:
            self.poll(0.0)
        for component in self.components.values():
            component.close()
        return [name for name, c in self.components.items() if c.running]

    def kill_all(self) -> None:
        for component in self.components.values():
            component.close()
