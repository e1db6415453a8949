"""A thread that samples replay batches ahead of the learner, gated by a samples-per-insert limit.

Responsible for: keeping a small queue of ready ``ReplayBatch`` es (drawing, decompressing and
stacking off the learner's critical path); owning the lock that serialises the replay between
the inserting thread, this sampler thread and the learner's priority updates; holding the
samples-per-insert ratio with a ``SampleToInsertRatio``: the thread samples only while the
limiter allows a whole batch, and ``add`` waits while it allows no insert.

Must not: compute priorities (the learner does), or outlive ``close()``: the thread is joined
with a bound, and every wait in here has one.

Priority updates are queued by the learner and applied by the sampler thread, under the lock,
before its next draw, so the learner never waits for a batch being decoded. An update for a
transition overwritten in the meantime is dropped by ``ReplayBuffer.update_priorities``.

With ``threaded=False`` (serial mode) there is no thread: the batches are drawn, in the same
order and under the same rules, whenever the owner asks how many are ready or takes them. What
is drawn then depends only on the calls made, never on a thread's timing, so a seeded run
repeats itself and an exact resume (``state_dict``) continues it.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBatch, ReplayBuffer


class SamplerClosed(RuntimeError):
    """The background sampler was closed (or its thread failed) while a caller waited."""


class BackgroundSampler:
    """Samples ``batch_size`` batches from ``replay`` on a thread, at most ``queue_size`` ahead."""

    def __init__(
        self,
        replay: ReplayBuffer,
        limiter: SampleToInsertRatio,
        *,
        batch_size: int,
        seed: int | None,
        queue_size: int = 4,
        threaded: bool = True,
    ):
        if batch_size < 1 or queue_size < 1:
            raise ValueError(
                f"batch_size and queue_size must be >= 1, got {batch_size}, {queue_size}"
            )
        # While inserts are held back the limiter allows about 2 * error_buffer - r samples;
        # the thread samples whole batches, so below one batch neither side could ever move.
        smallest = (batch_size + limiter.samples_per_insert) / 2
        if limiter.error_buffer < smallest:
            raise ValueError(
                f"the limiter's error_buffer {limiter.error_buffer:g} is too narrow for batches "
                f"of {batch_size} at {limiter.samples_per_insert:g} samples per insert: it must "
                f"be at least (batch_size + samples_per_insert) / 2 = {smallest:g}"
            )
        self.replay, self.limiter = replay, limiter
        self.batch_size, self.queue_size = batch_size, queue_size
        self._rng = np.random.default_rng(seed)
        self._cond = threading.Condition()  # guards replay, limiter, queue, updates, flags
        self._ready: deque[ReplayBatch] = deque()
        self._updates: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._run, name="replay-sampler", daemon=True)
            self._thread.start()

    def add(self, *args: object, timeout: float | None = None, **kwargs: object) -> bool:
        """``ReplayBuffer.add`` once the limiter allows an insert (the whole trajectory then
        goes in: the ratio overshoots by at most one trajectory). False if ``timeout`` seconds
        passed first, with nothing added."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.limiter.inserts_allowed() < 1:
                self._raise_if_closed()
                if not self._wait(deadline):
                    return False
            inserted = self.replay.add(*args, **kwargs)  # type: ignore[arg-type]
            self.limiter.inserted(inserted)
            self._cond.notify_all()
        return True

    def insert(self, *args: object, **kwargs: object) -> int:
        """``ReplayBuffer.add`` now, whatever the limiter allows: for an owner that holds the
        ratio upstream (a learner's sampling gate), so the ratio overshoots by at most what
        was already on its way. Returns the valid transitions stored (``ReplayBuffer.add``)."""
        with self._cond:
            self._raise_if_closed()
            inserted = self.replay.add(*args, **kwargs)  # type: ignore[arg-type]
            self.limiter.inserted(inserted)
            self._cond.notify_all()
        return inserted

    @property
    def num_ready(self) -> int:
        """Batches sampled and waiting (raises once the thread has failed)."""
        if self._error is not None:
            self._raise_if_closed()
        if self._thread is None:
            with self._cond:
                self._draw_while_allowed()
        return len(self._ready)

    def take_ready(self, most: int) -> list[ReplayBatch]:
        """Up to `most` of the batches ready now, without waiting."""
        with self._cond:
            self._raise_if_closed()
            if self._thread is None:
                self._draw_while_allowed()
            batches = [self._ready.popleft() for _ in range(min(most, len(self._ready)))]
            self._cond.notify_all()
        return batches

    def load_state_dict(self, replay_state: dict, limiter_state: dict) -> None:
        """Restore the replay and the limiter; batches drawn before are dropped."""
        with self._cond:
            self.replay.load_state_dict(replay_state)
            self.limiter.load_state_dict(limiter_state)
            self._ready.clear()
            self._updates.clear()
            self._cond.notify_all()

    def state_dict(self) -> dict:
        """What an exact resume adds to the replay's and the limiter's state: the random
        stream, the batches drawn and not yet taken, the priority updates not yet applied."""
        with self._cond:
            return {
                "rng": self._rng.bit_generator.state,
                "ready": list(self._ready),
                "updates": list(self._updates),
            }

    def load_extra_state(self, state: dict) -> None:
        """After ``load_state_dict``: continue exactly where ``state_dict`` was taken."""
        with self._cond:
            self._rng.bit_generator.state = state["rng"]
            self._ready = deque(state["ready"])
            self._updates = deque(state["updates"])
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> ReplayBatch:
        """The next ready batch; raises TimeoutError after ``timeout`` seconds without one,
        ``SamplerClosed`` once closed (carrying the thread's error, if it failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._thread is None:
                self._draw_while_allowed()
            while not self._ready:
                self._raise_if_closed()
                if not self._wait(deadline):
                    raise TimeoutError(f"no replay batch ready within {timeout} s")
            batch = self._ready.popleft()
            self._cond.notify_all()
            return batch

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Queue a priority update; the sampler thread applies it before its next draw."""
        if not np.all(np.isfinite(td_errors)):  # fail here, in the learner, not in the thread
            raise ValueError(f"td_errors must be finite, got {td_errors}")
        self._updates.append((np.array(indices), np.array(td_errors)))  # deque: thread-safe
        with self._cond:
            self._cond.notify_all()

    def set_beta(self, beta: float) -> None:
        with self._cond:
            self.replay.beta = beta

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread and join it (raising if it does not end within ``timeout``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is None:
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"replay sampler thread did not stop within {timeout} s")

    def __enter__(self) -> BackgroundSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait(self, deadline: float | None) -> bool:
        """Wait on the condition until notified or the deadline; False once it has passed
        (at once without a thread: nothing else would change what is waited for)."""
        if self._thread is None:
            return False
        if deadline is None:
            self._cond.wait()
            return True
        left = deadline - time.monotonic()
        return left > 0 and (self._cond.wait(left) or time.monotonic() < deadline)

    def _raise_if_closed(self) -> None:
        if self._error is not None:
            raise SamplerClosed("the replay sampler thread failed") from self._error
        if self._closed:
            raise SamplerClosed("the replay sampler is closed")

    def _can_sample(self) -> bool:
        return (
            len(self._ready) < self.queue_size
            and self.limiter.samples_allowed() >= self.batch_size
            and self.replay.num_sampleable > 0
        )

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._closed and not self._can_sample():
                        self._apply_updates()
                        self._cond.wait()
                    if self._closed:
                        return
                    self._draw()
        except BaseException as error:  # handed to the learner through get(); never lost
            with self._cond:
                self._error = error
                self._closed = True
                self._cond.notify_all()

    def _draw_while_allowed(self) -> None:
        """Without a thread: the draws the thread would have made by now."""
        while not self._closed and self._can_sample():
            self._draw()
        self._apply_updates()

    def _draw(self) -> None:
        """One batch, under the lock (decoding reads frame slots that an add could overwrite),
        after the priority updates queued before it."""
        self._apply_updates()
        batch = self.replay.sample(self.batch_size, self._rng)
        self.limiter.sampled(self.batch_size)
        self._ready.append(batch)
        self._cond.notify_all()

    def _apply_updates(self) -> None:
        while self._updates:
            indices, td_errors = self._updates.popleft()
            self.replay.update_priorities(indices, td_errors)
