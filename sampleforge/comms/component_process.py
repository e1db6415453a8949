"""The process shell every component runs in, and the in-process host serial mode uses.

A component is any object with `name`, `running`, `poll(timeout)` and `close()`. In its own
process it is built there (from picklable arguments), polled until it stops, and every
exception is sent to the runner as `ComponentFailed` with its traceback before the process
exits non-zero: failures always reach the runner, they are never only logged.

Children live through SIGINT and SIGTERM (the runner alone decides how to shut down: a
`systemctl stop` or a scheduler sends SIGTERM to every process of the run, and a learner killed
by it could not write the final checkpoint; the host ends a hung child with SIGKILL) and ask the
kernel to kill them if the runner dies (Linux parent-death signal). Each leads its own process
group, so that what its envs start can be killed with it (`group_guard.py`); Ctrl-C at a
terminal then reaches the runner alone.
A child forked from the fork server (`hosts.py`) is the server's child: the server exits when
the runner does, and the signal then reaches the child.
"""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator
from multiprocessing import forkserver, reduction
from typing import Any, Callable, Protocol

from faster_fifo import Queue

from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.group_guard import lead_own_group
from sampleforge.comms.heap import HeapTrimmer, reuse_freed_tensor_memory
from sampleforge.comms.interrupts import leave_signals_to_the_parent
from sampleforge.comms.messages import ComponentFailed, ComponentStarted, ComponentStopped
from sampleforge.comms.queues import map_ring_pages, send_many

POLL_TIMEOUT_SEC = 0.1


class Component(Protocol):
    name: str
    running: bool

    def poll(self, timeout: float) -> None: ...

    def close(self) -> None: ...


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        pass  # best effort: the runner also stops children explicitly


def _name_process(name: str) -> None:
    """Show the component's name in ps/top (Linux keeps 15 bytes)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            pr_set_name = 15
            short = (
                name.replace("rollout_worker_", "rollout")
                .replace("inference_worker_p", "infer")
                .replace("learner_p", "learner")
            )
            libc.prctl(pr_set_name, f"sf:{short}".encode()[:15])
        except OSError:
            pass


def _release_shared_tensors(kwargs: dict[str, Any]) -> None:
    """Let go of the tensors shared into this process (the policy weights), before it exits.

    On CUDA they are the runner's tensors mapped here through IPC; the runner can free them
    only once every process has let go, and warns at its exit otherwise ("Producer process
    has been terminated before all shared CUDA tensors released"). Released explicitly rather
    than by dropping references: left to interpreter teardown, the mapping outlives them.
    Only here, in the component's own process: in serial mode the runner shares the objects.
    """
    for shared in releasables_in(kwargs):
        shared.release_shared()


def releasables_in(value: Any) -> Iterator[Any]:
    """Every object with a `release_shared()` method in `value`, looking through lists,
    tuples, dicts and dataclasses (a component's endpoints)."""
    for item in _contents(value, into_dataclasses=True):
        if callable(getattr(type(item), "release_shared", None)):
            yield item


def _contents(value: Any, *, into_dataclasses: bool) -> Iterator[Any]:
    """`value` and, depth first, everything inside its lists, tuples and dicts (and the
    fields of its dataclasses if `into_dataclasses`); each object once."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, (list, tuple)):
            children = list(item)
        elif isinstance(item, dict):
            children = list(item.values())
        elif into_dataclasses and dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, field.name) for field in dataclasses.fields(item)]
        else:
            continue
        stack.extend(reversed(children))


class InheritedState:
    """What a child takes from the runner as it starts: environment variables, stdout and
    stderr. A spawned child inherits them anyway; one forked from the fork server would have
    the server's, from when the server started, so these travel with its arguments and
    `apply()` puts them in place."""

    def __init__(self, environment: dict[str, str] | None = None, stdio: list | None = None):
        self.environment = dict(os.environ) if environment is None else environment
        self._stdio = stdio or []

    def __reduce__(self):
        # Runs while the child is being started, where `DupFd` sends the descriptors along.
        return (InheritedState, (self.environment, [reduction.DupFd(fd) for fd in (1, 2)]))

    def apply(self) -> None:
        """In the child: the runner's environment, and its stdout and stderr on fds 1 and 2."""
        os.environ.clear()
        os.environ.update(self.environment)
        tempfile.tempdir = None  # read again from TMPDIR when next asked
        sys.stdout.flush()
        sys.stderr.flush()
        for target, duplicate in zip((1, 2), self._stdio):
            fd = duplicate.detach()
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)


def _let_the_fork_server_go() -> None:
    """A child forked from the fork server holds the server's "alive" pipe, which the server
    watches to exit once its clients have. Only the runner keeps it: the server then exits
    with the runner, and the parent-death signal reaches this child."""
    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None and multiprocessing.parent_process() is not None:
        os.close(fd)
        setattr(server, "_forkserver_alive_fd", None)  # noqa: B010 - not in typeshed


def _runner_alive() -> bool:
    parent = multiprocessing.parent_process()  # the runner, also for a fork-server child
    return parent is None or parent.is_alive()


def component_main(
    name: str,
    build: Callable[..., Component],
    kwargs: dict[str, Any],
    report_queue,
    torch_threads: int = 1,
    inherited: InheritedState | None = None,
) -> None:
    """Entry point of a component process: build, poll until stopped, report everything."""
    leave_signals_to_the_parent()  # both were deferred since the host started this process
    if inherited is not None:
        inherited.apply()
    lead_own_group()  # before anything starts a process that must be in it
    _die_with_parent()
    _let_the_fork_server_go()
    _name_process(name)
    if not _runner_alive():  # the runner died before we could arm the signal
        os._exit(1)
    import torch

    torch.set_num_threads(torch_threads)
    reuse_freed_tensor_memory()
    map_ring_pages(queues_in([kwargs, report_queue]))
    component = None
    try:
        component = build(**kwargs)
        send_many(report_queue, [ComponentStarted(name, os.getpid())])
        heap = HeapTrimmer()
        while component.running:
            component.poll(POLL_TIMEOUT_SEC)
            heap.maybe_trim()
        component.close()
        _release_shared_tensors(kwargs)
        send_many(report_queue, [ComponentStopped(name)])
    except BaseException as e:  # noqa: BLE001 - every failure must reach the runner
        report_failure(report_queue, name, e)
        sys.exit(1)


def queues_in(value: Any) -> Iterator[Queue]:
    """Every faster-fifo queue in `value`, looking through lists, tuples, dicts and doorbells.

    Not through dataclasses: which rings a process maps stays what its arguments name."""
    for item in _contents(value, into_dataclasses=False):
        if isinstance(item, Queue):
            yield item
        elif isinstance(item, DoorbellQueue):
            yield item.queue


def report_failure(report_queue, name: str, error: BaseException) -> None:
    message = ComponentFailed(
        name, f"{type(error).__name__}: {error}", "".join(traceback.format_exception(error))
    )
    try:
        send_many(report_queue, [message], timeout=5.0)
    except Exception:  # noqa: BLE001 - the queue itself may be gone; stderr still has it
        print(message.traceback, file=sys.stderr, flush=True)
