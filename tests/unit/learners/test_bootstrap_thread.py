"""BootstrapThread (learners/bootstrap_thread.py): passes without autograd, inline or on a
thread of its own. The value learner's use of it is tested in test_value_learner.py."""

from __future__ import annotations

import threading

import torch

from sampleforge.learners.bootstrap_thread import BootstrapThread


def test_the_passes_run_on_another_thread_without_autograd():
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append((threading.get_ident(), torch.is_grad_enabled()))
        return x * 2

    x = torch.ones(3, requires_grad=True)
    inline, concurrent = BootstrapThread(False), BootstrapThread(True)
    try:
        for runner in (inline, concurrent):
            out = runner.submit(record, x).result()
            assert not out.requires_grad and torch.equal(out, torch.full((3,), 2.0))
    finally:
        concurrent.close()
    (inline_thread, inline_grad), (other_thread, other_grad) = seen
    assert inline_thread == threading.get_ident() != other_thread
    assert not inline_grad and not other_grad
