"""Processes that die or raise: the recovery policy of `components/supervisor.py`, end to end.

The runner runs in a background thread (`BackgroundRun`: `start`, the `train` calls and
`close`); the test's thread injects the faults and times the runner's reactions. A run that must
survive its faults is stopped by a training callback once the drill is over, then trained again
to a fixed target, which it must reach normally. A runner that gets stuck cannot hang the
session: the drill fails, every child is SIGKILLed and the stuck runner thread is left behind,
its Python stack quoted in the failure.

Where a process is SIGKILLed matters: `_stop_and_kill_when` freezes it (SIGSTOP), looks at where
it stopped (/proc/<pid>/syscall, /proc/<pid>/maps, a queue's lock word) and kills it there or
lets it run on and tries again. `_kill_while_waiting_on_a_queue` kills a worker blocked in its
inbox's condition-variable wait (where an idle worker spends most of its time; this used to
wedge the inbox), `_kill_outside_queue_ops` kills it while it runs its own code, and
`_kill_holding_the_lock_of` while it holds a queue's lock (the runner's exit watcher releases
it, `comms/queue_locks.py`).
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import pytest

from sampleforge.checkpoint import CheckpointStore, checkpoint_info
from sampleforge.comms.messages import LoadWeights
from sampleforge.comms.queues import receive, send_many
from sampleforge.components.learner_worker import STAGER_KEY
from sampleforge.components.runner import Runner, TrainingError
from sampleforge.config import make_config
from sampleforge.testing.ci import unavailable
from sampleforge.testing.processes import is_alive, process_state

FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
FUTEX_WAIT_BITSET = 9  # what glibc's pthread_cond_(timed)wait sleeps in
NOT_SAFE_TO_DIE_IN = ("faster_fifo", "libc.so", "libc-", "ld-linux", "libpthread")

pytestmark = [
    pytest.mark.skipif(
        FUTEX is None or not Path(f"/proc/{os.getpid()}/syscall").exists(),
        reason="needs Linux /proc/<pid>/syscall on x86_64 or aarch64",
    ),
    pytest.mark.exclusive,  # deaths must be noticed within wall-clock bounds
]


def _cfg(tmp_path, **overrides):
    settings = dict(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        device="cpu",
        num_workers=2,
        num_envs_per_worker=4,
        rollout=16,
        batch_size=64,
        seed=11,
        stop_at_mean_return=float("inf"),
        report_every_sec=1,
        tensorboard=False,
        train_for_env_steps=100_000_000,
    )
    settings.update(overrides)
    return make_config(**settings)


# --- processes ------------------------------------------------------------------------------------
def _state(pid: int) -> str:
    return process_state(pid) or "gone"


def _alive(pid: int) -> bool:
    return is_alive(pid) and _state(pid) != "X"


def _mapped_file(pid: int, address: int) -> str:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        low, high = (int(x, 16) for x in parts[0].split("-"))
        if low <= address < high:
            return parts[5] if len(parts) > 5 else ""
    return ""


def _stop_and_kill_when(pid: int, wanted, timeout: float = 20.0) -> str:
    """Freeze `pid` (SIGSTOP) until `wanted(pid, syscall_fields)` holds where it stopped, then
    SIGKILL it (still frozen, so exactly there); returns a description of where."""
    started = time.monotonic()
    deadline = started + timeout
    attempts = 0
    while time.monotonic() < deadline:
        attempts += 1
        os.kill(pid, signal.SIGSTOP)
        try:
            stop_deadline = time.monotonic() + 2
            while _state(pid) != "T" and time.monotonic() < stop_deadline:
                time.sleep(0.0005)
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
            where = wanted(pid, fields) if _state(pid) == "T" else None
            if where:
                os.kill(pid, signal.SIGKILL)
                return (
                    f"{where}; frozen {attempts} times in {time.monotonic() - started:.1f} s "
                    "to find it there"
                )
        except BaseException:
            os.kill(pid, signal.SIGKILL)
            raise
        os.kill(pid, signal.SIGCONT)
        time.sleep(random.uniform(0.001, 0.02))
    os.kill(pid, signal.SIGCONT)
    raise AssertionError(f"pid {pid} never stopped at a suitable point within {timeout} s")


def _running_own_code(pid: int, fields: list[str]) -> str | None:
    if fields[0] != "-1":  # frozen inside a system call (a queue wait, a lock, a sleep...)
        return None
    library = _mapped_file(pid, int(fields[2], 16))
    if library.startswith("/") and not any(s in library for s in NOT_SAFE_TO_DIE_IN):
        return f"running code in {Path(library).name}"
    return None


def _in_condition_wait(pid: int, fields: list[str]) -> str | None:
    if fields[0] == str(FUTEX) and int(fields[2], 16) & 0x7F == FUTEX_WAIT_BITSET:
        return "blocked in a queue's pthread_cond_timedwait"
    return None


def _kill_outside_queue_ops(pid: int) -> str:
    return _stop_and_kill_when(pid, _running_own_code)


def _kill_while_waiting_on_a_queue(pid: int) -> str:
    return _stop_and_kill_when(pid, _in_condition_wait)


# faster-fifo 1.5 `struct Queue` (in `Queue.queue_obj_buffer`): size_t max_size_bytes at 0, its
# pthread_mutex_t at 56 (int __lock, unsigned __count, int __owner [a thread id], ..., int __kind
# at 72; kind 128 = process-shared, not robust).
_MUTEX_OFFSET = 56


def _lock_word(q) -> tuple[int, int]:
    """(locked, owner thread id) of a faster-fifo queue's mutex."""
    raw = bytes(q.queue_obj_buffer[: _MUTEX_OFFSET + 20])
    if (
        struct.unpack_from("N", raw, 0)[0] != q.max_size_bytes
        or struct.unpack_from("i", raw, _MUTEX_OFFSET + 16)[0] != 128
    ):
        unavailable("unknown faster-fifo Queue layout: cannot read its lock")
    locked, _, owner = struct.unpack_from("iIi", raw, _MUTEX_OFFSET)
    return locked, owner


def _kill_holding_the_lock_of(pid: int, q, other_queues: list) -> str:
    """SIGKILL `pid` while it holds `q`'s lock: gdb stops it when it enters faster-fifo's
    queue_put or queue_get for that queue (recognised by its size, the first field of the
    queue, which must differ from the sizes of `other_queues`), then at the pthread_mutex_unlock
    of that queue's mutex, and kills it there. (A breakpoint on pthread_mutex_unlock alone, with
    the same condition, traps every unlock of a training learner: a minute of gdb round trips.)"""
    gdb = shutil.which("gdb")
    if gdb is None or platform.machine() != "x86_64":
        unavailable("needs gdb on x86_64 to stop a process inside a queue operation")
    _lock_word(q)  # skips on an unknown layout
    if q.max_size_bytes in {o.max_size_bytes for o in other_queues}:
        unavailable("the queue cannot be told apart from the others by its size")
    this_queue = f"*(unsigned long *)$rdi == {q.max_size_bytes}"
    t0 = time.monotonic()
    gdb_run = subprocess.run(
        [
            gdb,
            "-nx",
            "-batch",
            "-iex",
            "set auto-solib-add off",
            "-p",
            str(pid),
            "-ex",
            "set pagination off",
            "-ex",
            "sharedlibrary libc[.]so",
            "-ex",
            "sharedlibrary faster_fifo",
            "-ex",
            f"break *_Z9queue_putPvS_PPKvPKmmif if {this_queue}",
            "-ex",
            f"break *_Z9queue_getPvS_S_mmmPmS0_S0_if if {this_queue}",
            "-ex",
            "continue",
            "-ex",
            "set $mutex = $rdi + " + str(_MUTEX_OFFSET),
            "-ex",
            "delete",
            "-ex",
            "break pthread_mutex_unlock if $rdi == $mutex",
            "-ex",
            "continue",
            "-ex",
            "kill",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    if _alive(pid):
        unavailable(f"gdb could not stop pid {pid}: {gdb_run.stderr.strip()[-300:]}")
    # Whether it died holding the lock is for the caller to check: the runner releases it (and
    # says so) within a fraction of a second, so the lock word may already be clear here.
    return f"holding the queue's lock (stopped and killed by gdb in {time.monotonic() - t0:.1f} s)"


def _released_locks(caplog, name: str) -> list[str]:
    """Queues whose lock the runner released after `name` died holding it."""
    return [
        r.getMessage().split("lock of queue ")[1].split(";")[0]
        for r in caplog.records
        if r.getMessage().startswith(f"{name} (pid") and "died holding the lock" in r.getMessage()
    ]


# --- the runner in the background -----------------------------------------------------------------
class BackgroundRun:
    """`program(runner, run)` runs in a thread between `runner.start()` and `runner.close()`."""

    def __init__(self, cfg, program):
        self.runner = Runner(cfg)
        self.program = program
        self.drill_over = threading.Event()
        self.done = threading.Event()
        self.result = None
        self.error: BaseException | None = None
        self.failed_at: float | None = None
        self.times: dict = {}
        self._thread = threading.Thread(target=self._main, name="runner", daemon=True)

    def _main(self) -> None:
        try:
            self.runner.start()
            self.result = self.program(self.runner, self)
        except BaseException as e:  # noqa: BLE001 - inspected by the test
            self.failed_at = time.monotonic()
            self.error = e
        finally:
            try:
                self.runner.close()
            finally:
                self.done.set()

    def keep_training(self, status) -> bool:
        """Training callback: go on until the drill is over."""
        return not self.drill_over.is_set()

    def __enter__(self) -> "BackgroundRun":
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.drill_over.set()
        if exc is not None:  # the drill failed: don't wait for a run that may be stuck
            if not self.done.wait(2):
                where = self.where()
                self.kill_children()
                raise AssertionError(f"{exc}\n\nThe runner thread is stuck at:\n{where}") from exc
            return
        if not self.done.wait(90):
            where = self.where()
            self.kill_children()
            raise AssertionError(f"the run did not end within 90 s; stuck at:\n{where}")

    def where(self) -> str:
        frame = sys._current_frames().get(self._thread.ident)
        return "".join(traceback.format_stack(frame)[-8:]) if frame else "(finished)"

    def kill_children(self) -> None:
        host = self.runner.host
        for pid in host.pids().values() if host is not None else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.done.wait(5)

    def wait(self, condition, timeout: float) -> bool:
        """Poll `condition` every 10 ms for up to `timeout` s (less if the run ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.done.is_set():
            if condition():
                return True
            time.sleep(0.01)
        return bool(condition())

    def wait_until_training(self, min_env_steps: int = 500) -> None:
        p = self.runner.progress
        started = self.wait(lambda: self.runner.started, 120)
        assert started and self.wait(
            lambda: p.total_env_steps >= min_env_steps and p.frames_collected > 0, 90
        ), f"training never got under way: {self.error!r}"

    def frames_grow(self, by: int, timeout: float) -> bool:
        p = self.runner.progress
        before = p.frames_collected
        return self.wait(lambda: p.frames_collected >= before + by, timeout)


def _survive_then_train_to_a_target(runner: Runner, run: BackgroundRun) -> dict:
    """Phase 1 lasts as long as the drill; phase 2 must reach a target normally."""
    first = runner.train(seconds=150, callback=run.keep_training)
    target = runner.progress.total_env_steps + 3_000
    second = runner.train(until_env_steps=target)
    return {
        "first": first,
        "second": second,
        "target": target,
        "restarts": dict(runner.supervisor.restarts),
        "alive": {n: p.is_alive() for n, p in runner.host.processes.items()},
        "generations": runner.wiring.ledger.generations.tolist(),
        "slots": _account_for_slots(runner),
    }


def _account_for_slots(runner: Runner, timeout: float = 15.0) -> dict:
    """With the rollout workers paused, wait until every slot is in the free-slot queue or
    owned by a worker (the learner frees what it staged). Free slots are put back."""
    wiring = runner.wiring
    num_slots = wiring.buffer.layout.num_slots
    owners = wiring.ledger.slot_owners
    free: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            free += receive(wiring.slots.free_queue, 0.0)
            owned = {s: int(owners[s]) for s in range(num_slots) if int(owners[s]) >= 0}
            if len(set(free) | set(owned)) >= num_slots or time.monotonic() > deadline:
                return {"num_slots": num_slots, "free": list(free), "owned": owned}
            time.sleep(0.05)
    finally:
        send_many(wiring.slots.free_queue, list(free))


def _assert_slots_restored(slots: dict, workers: int) -> None:
    free, owned, num_slots = slots["free"], slots["owned"], slots["num_slots"]
    assert set(owned.values()) <= set(range(workers)), owned
    assert len(free) == len(set(free)), f"a slot is in the free queue twice: {sorted(free)}"
    assert not set(free) & set(owned), "a slot is both free and owned"
    assert set(free) | set(owned) == set(range(num_slots)), (
        f"lost slots: {sorted(set(range(num_slots)) - set(free) - set(owned))}"
    )


# The drills run a value-based run too: its learner also holds the replay and its sampler
# thread, and its checkpoints must carry the replay (--save_replay).
_ALGORITHM_SETTINGS = {
    "appo": {},
    "dqn": dict(algorithm="dqn", save_replay=True, learning_starts=200, samples_per_insert=4.0),
}


# --- rollout workers ------------------------------------------------------------------------------
def _ledger_state(runner: Runner) -> str:
    """What a stall leaves in the sampler's bookkeeping (for the failure message)."""
    ledger = runner.wiring.ledger
    return (
        f"slot owners {ledger.slot_owners.tolist()}, unread slots per policy "
        f"{ledger.slot_readers.sum(dim=0).tolist()}, sampling slots "
        f"{ledger.sampling_slots.tolist()}, in flight "
        f"{[ledger.slots_in_flight(p) for p in range(len(ledger.sampling_slots))]}, "
        f"generations {ledger.generations.tolist()}"
    )


def _kill_rollout_worker(run: BackgroundRun, k: int) -> dict:
    """The k-th kill: rollout_worker_{k % 2}, waiting on its inbox (k even) or running its own
    code (k odd); then waits for the recovery."""
    runner = run.runner
    worker = k % 2
    name = f"rollout_worker_{worker}"
    old = runner.host.pids()[name]
    where = (_kill_while_waiting_on_a_queue if k % 2 == 0 else _kill_outside_queue_ops)(old)
    t0 = time.monotonic()
    assert run.wait(lambda: runner.supervisor.restarts["rollout_worker"] >= k + 1, 10), (
        f"death {k + 1} ({name}) never noticed"
    )
    noticed = time.monotonic() - t0
    assert run.wait(lambda: runner.host.pids()[name] != old, 30), f"{name} not replaced"
    new = runner.host.pids()[name]
    replaced = time.monotonic() - t0
    beat_after = time.time()
    assert run.wait(lambda: float(runner.wiring.ledger.heartbeats[worker]) > beat_after, 60), (
        f"the replacement of {name} never ran"
    )
    assert run.frames_grow(1_000, 60), (
        f"sampling stalled after the replacement; {_ledger_state(runner)}"
    )
    return dict(
        name=name,
        old=old,
        new=new,
        where=where,
        noticed=noticed,
        replaced=replaced,
        running=time.monotonic() - t0,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algorithm", ["appo", "dqn"])
def test_sigkilled_rollout_workers_are_replaced_and_their_slots_reclaimed(tmp_path, algorithm):
    # DQN: the replay stager frees each slot at insert and restarts the replaced worker's
    # streams; sampling must go on under its rate limiter as it does under the Batcher.
    cfg = _cfg(tmp_path, **_ALGORITHM_SETTINGS[algorithm])
    with BackgroundRun(cfg, _survive_then_train_to_a_target) as run:
        run.wait_until_training()
        kills = [_kill_rollout_worker(run, k) for k in range(3)]
    if run.error is not None:
        raise run.error
    out = run.result
    for k, r in enumerate(kills):
        print(
            f"kill {k + 1} ({r['name']}, {r['where']}): death noticed in {r['noticed']:.2f} s, "
            f"replacement started in {r['replaced']:.2f} s, sampling again in "
            f"{r['running']:.2f} s"
        )
    assert all(r["noticed"] < 2 for r in kills), kills
    assert all(r["new"] != r["old"] and not _alive(r["old"]) for r in kills), kills
    assert out["first"].stopped_because == "callback"
    assert out["second"].stopped_because == "train_for_env_steps"
    assert out["second"].env_steps >= out["target"]
    assert out["restarts"] == {"rollout_worker": 3, "inference_worker": 0}
    assert out["generations"] == [2, 1]  # worker 0 replaced twice, worker 1 once
    assert all(out["alive"].values()), out["alive"]
    _assert_slots_restored(out["slots"], workers=2)


# --- inference worker -----------------------------------------------------------------------------
def _drill_inference_kill(run: BackgroundRun, kill, resume_timeout: float = 30) -> dict:
    runner, p = run.runner, run.runner.progress
    name = "inference_worker_p0_0"
    run.wait_until_training()
    old = runner.host.pids()[name]
    where = kill(old)
    t0 = time.monotonic()
    assert run.wait(lambda: runner.supervisor.restarts["inference_worker"] >= 1, 10), (
        "death never noticed"
    )
    noticed = time.monotonic() - t0
    # Frames stepped before the kill may be reported up to ~1 s later (sampler reports are 1 s
    # apart): only growth beyond what had been reported 1.5 s after the kill counts.
    run.wait(lambda: time.monotonic() - t0 >= 1.5, 2)
    stalled = p.frames_collected
    resumed = run.wait(lambda: p.frames_collected > stalled, resume_timeout)
    resumed_in = time.monotonic() - t0
    assert resumed, (
        f"sampling never resumed after the inference worker was killed ({where}) and replaced"
    )
    assert run.frames_grow(1_000, 30), "sampling stalled again"
    return dict(
        old=old, new=runner.host.pids()[name], where=where, noticed=noticed, resumed=resumed_in
    )


@pytest.mark.timeout(150)
def test_sigkilled_inference_worker_is_replaced_and_sampling_resumes(tmp_path):
    with BackgroundRun(_cfg(tmp_path), _survive_then_train_to_a_target) as run:
        drill = _drill_inference_kill(run, _kill_outside_queue_ops)
    if run.error is not None:
        raise run.error
    out = run.result
    print(
        f"inference worker killed ({drill['where']}): death noticed in "
        f"{drill['noticed']:.2f} s, frames flowing again {drill['resumed']:.2f} s after the kill"
    )
    assert drill["noticed"] < 2
    assert drill["resumed"] < 5
    assert drill["new"] != drill["old"] and out["alive"]["inference_worker_p0_0"]
    assert out["restarts"] == {"rollout_worker": 0, "inference_worker": 1}
    assert out["first"].stopped_because == "callback"
    assert out["second"].stopped_because == "train_for_env_steps"
    assert out["second"].env_steps >= out["target"]


@pytest.mark.timeout(120)
def test_inference_worker_sigkilled_holding_the_request_queue_lock_is_replaced(tmp_path, caplog):
    # faster-fifo's mutex is not robust: without the runner releasing it, every rollout worker
    # would block in send_many(InferenceRequested) and the replacement in receive() for ever.
    def kill(pid: int) -> str:
        wiring = run.runner.wiring
        others = [
            wiring.report_queue,
            *[i for w in wiring.rollout_inboxes for i in w],
            *[s.control_queue for s in wiring.specs if s.name.startswith("inference")],
        ]
        return _kill_holding_the_lock_of(pid, wiring.inference_queues[0].queue, others)

    with BackgroundRun(_cfg(tmp_path), _survive_then_train_to_a_target) as run:
        drill = _drill_inference_kill(run, kill, resume_timeout=8)
    if run.error is not None:
        raise run.error
    assert _released_locks(caplog, "inference_worker_p0_0") == ["inference_0"]
    assert drill["resumed"] < 5
    assert run.result["second"].stopped_because == "train_for_env_steps"


# --- learner --------------------------------------------------------------------------------------
def _train_until_it_fails(runner: Runner, run: BackgroundRun):
    return runner.train(seconds=90)  # returning normally fails the test


@pytest.mark.timeout(150)
@pytest.mark.parametrize("algorithm", list(_ALGORITHM_SETTINGS))
def test_sigkilled_learner_fails_the_run_and_leaves_the_checkpoint_intact(tmp_path, algorithm):
    cfg = _cfg(tmp_path, save_every_sec=1, **_ALGORITHM_SETTINGS[algorithm])
    with BackgroundRun(cfg, _train_until_it_fails) as run:
        runner = run.runner
        run.wait_until_training()
        store = CheckpointStore(runner.exp.checkpoint_dir(0))
        assert run.wait(lambda: store.latest() is not None, 30), "no checkpoint before the kill"
        before = store.latest()
        where = _kill_outside_queue_ops(runner.host.pids()["learner_p0"])
        killed_at = time.monotonic()
        run.wait(lambda: run.error is not None, 15)
    assert isinstance(run.error, TrainingError), f"expected TrainingError, got {run.error!r}"
    elapsed = run.failed_at - killed_at
    message = str(run.error)
    print(f"learner SIGKILL ({where}) -> TrainingError in {elapsed:.2f} s: {message[:100]}")
    assert elapsed < 10
    assert "learner_p0 died" in message and "checkpoint is intact" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped (corrupt) checkpoint file fails the test
        loaded = CheckpointStore(runner.exp.checkpoint_dir(0)).load_latest()
    assert loaded is not None, "no loadable checkpoint"
    state, path = loaded
    assert path.name >= before.name  # the newest intact one, not an older fallback
    assert state["model"] and state["env_steps"] > 0
    if cfg.save_replay:
        assert state[STAGER_KEY]["replay"], "the checkpoint lost the replay"
    with Runner(cfg) as resumed:  # the same command resumes from it
        resumed.start()
        version, env_steps = checkpoint_info(path)
        assert resumed.progress.env_steps[0] == env_steps
        assert resumed.progress.policy_version[0] == version


@pytest.mark.timeout(180)
def test_learner_sigkilled_holding_the_report_queue_lock_cannot_wedge_the_runner(tmp_path, caplog):
    # The runner's own loop reads the report queue: blocked on the dead learner's lock, only
    # its exit watcher thread can release it so that the death is noticed at all.
    with BackgroundRun(_cfg(tmp_path), _train_until_it_fails) as run:
        runner = run.runner
        run.wait_until_training()
        wiring = runner.wiring
        others = [q for name, q in wiring.queues().items() if name != "reports"]
        where = _kill_holding_the_lock_of(
            runner.host.pids()["learner_p0"],
            wiring.report_queue,
            [getattr(q, "queue", q) for q in others],
        )
        killed_at = time.monotonic()
        run.wait(lambda: run.error is not None, 15)
    assert isinstance(run.error, TrainingError), f"expected TrainingError, got {run.error!r}"
    print(f"learner SIGKILL ({where}) -> TrainingError in {run.failed_at - killed_at:.2f} s")
    assert _released_locks(caplog, "learner_p0") == ["reports"]
    assert run.failed_at - killed_at < 10
    assert "learner_p0 died" in str(run.error)


@pytest.mark.timeout(120)
def test_exception_in_the_learner_fails_the_run_with_its_error(tmp_path):
    with BackgroundRun(_cfg(tmp_path), _train_until_it_fails) as run:
        runner = run.runner
        run.wait_until_training()
        # weights announced but never published: the learner refuses them with an exception
        send_many(runner.wiring.learner_inboxes[0], [LoadWeights(7)])
        sent_at = time.monotonic()
        run.wait(lambda: run.error is not None, 15)
    assert isinstance(run.error, TrainingError), f"expected TrainingError, got {run.error!r}"
    elapsed = run.failed_at - sent_at
    message = str(run.error)
    print(f"learner exception -> TrainingError in {elapsed:.2f} s: {message.splitlines()[0][:120]}")
    assert elapsed < 10  # reaches the runner at its next pump; 10 s leaves room for a busy machine
    assert message.startswith(
        "learner_p0 failed: RuntimeError: learner_p0: incoming weights "
        "are at version -1, expected 7"
    )  # the learner's own exception
    assert "Traceback" in message and "_load_incoming_weights" in message  # with its traceback
