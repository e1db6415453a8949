"""BootstrapThread: the passes of a replay learner's update that need no gradient, on a thread
of their own (`learner_bootstrap_thread`).

An update of a conv Q-network on a CPU is five convolutional passes in a row: the online
network forward on the sampled states, the online network on the bootstrap states (Double
DQN's argmax), the target network on them, and the backward pass (about two forwards). The two
bootstrap passes need no gradient and no result of the first; they can run beside it on a
second core. The target network's pass even needs nothing of the current update: while the
online network runs its backward pass, the target network can evaluate the next batch.

The copy a non-finite step is undone from (`learners/step_undo.py`: the parameters and Adam's
two moments, about 3 ms of a Rainbow update's 35 on one core) is the same kind of work: nothing
changes the parameters between the loss and the step, so it is taken beside the backward pass.

So on a learner with `learner_torch_threads` 1 the thread takes two of the five passes and the
undo copy off the critical path, and each update does the same arithmetic on the same weights
as the serial one (only the random draws of noisy nets and sampled quantile fractions come in
another order).

The continuous-control learner (`learners/continuous_learner.py`) uses it the same way: a'
and the target critics at s' beside the critics' forward pass (the draws of a' stay in the
serial order, as the main thread draws nothing meanwhile), and the undo copies of the critic
and actor steps beside their backward passes. The next batch's bootstrap is not computed early
there: it needs the actor and the target critics after this update.

Must not: write the parameters or the optimizer's state; what it runs only reads them.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


class BootstrapThread:
    """Runs no-grad passes on a second thread, or inline when not `concurrent`."""

    def __init__(self, concurrent: bool):
        self._pool = (
            ThreadPoolExecutor(1, thread_name_prefix="bootstrap_pass") if concurrent else None
        )

    @property
    def concurrent(self) -> bool:
        return self._pool is not None

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """`fn(*args)` without autograd, on the thread (or now, inline)."""
        if self._pool is not None:
            return self._pool.submit(_without_grad, fn, *args)
        done: Future[T] = Future()
        done.set_result(_without_grad(fn, *args))
        return done

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def undo_copy_taken(saving: Future[None] | None) -> bool:
    """Whether the undo copy of a step was taken on the thread (`saving` is its future, None
    when it was not); waits until it is done, since the step may not change the parameters
    before."""
    if saving is None:
        return False
    saving.result()
    return True


def _without_grad(fn: Callable[..., T], *args: object) -> T:
    # Grad mode is thread-local: a new thread starts with autograd on.
    with torch.no_grad():
        return fn(*args)
