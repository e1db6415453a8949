"""Unit tests for the shared policy weights and their sequence lock (buffers/shared_weights.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as torch_mp
from torch import nn

from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel


class Net(nn.Module):
    """Parameters plus a registered (non-parameter) buffer, like an obs normaliser."""

    def __init__(self, width: int = 6):
        super().__init__()
        self.fc1 = nn.Linear(4, width)
        self.fc2 = nn.Linear(width, 2)
        self.register_buffer("stat", torch.randn(3, width))

    def tensors(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.parameters()] + list(self.buffers())


def _same(a: Net, b: Net) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


def _snapshot(model: Net) -> list[torch.Tensor]:
    return [t.clone() for t in model.tensors()]


def _unchanged(model: Net, snapshot: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(model.tensors(), snapshot))


def test_model_numel_counts_parameters_and_buffers():
    model = Net()
    assert model_numel(model) == ((4 * 6 + 6) + (6 * 2 + 2) + 3 * 6, 0)
    model.register_buffer("count", torch.zeros((), dtype=torch.int64))
    assert model_numel(model) == ((4 * 6 + 6) + (6 * 2 + 2) + 3 * 6, 1)


def test_flat_and_header_are_shared():
    weights = SharedPolicyWeights(model_numel(Net()))
    assert weights.flat.is_shared() and weights.header.is_shared()
    assert (weights.flat.numel(), weights.exact.numel()) == model_numel(Net())


def test_version_is_minus_one_before_first_publish():
    weights = SharedPolicyWeights(model_numel(Net()))
    assert weights.version == -1
    weights.publish(Net(), version=0)
    assert weights.version == 0
    weights.publish(Net(), version=5)
    assert weights.version == 5


def test_pull_before_any_publish_is_a_no_op():
    weights = SharedPolicyWeights(model_numel(Net()))
    model = Net()
    before = _snapshot(model)
    assert weights.pull(model, -1) == -1
    assert _unchanged(model, before)


def test_publish_then_pull_copies_parameters_and_buffers():
    torch.manual_seed(0)
    source, target = Net(), Net()
    assert not _same(source, target)
    weights = SharedPolicyWeights(model_numel(source))
    weights.publish(source, version=3)
    assert weights.pull(target, -1) == 3
    assert _same(source, target)
    assert torch.equal(target.stat, source.stat)  # the buffer travelled too
    # the target owns its copy: changing the source later does not leak into it
    with torch.no_grad():
        source.fc1.weight.add_(1.0)
    assert not torch.equal(target.fc1.weight, source.fc1.weight)


def test_pull_with_same_version_is_a_no_op():
    weights = SharedPolicyWeights(model_numel(Net()))
    source, target = Net(), Net()
    weights.publish(source, version=1)
    assert weights.pull(target, -1) == 1
    with torch.no_grad():
        target.fc2.bias.fill_(42.0)
        target.stat.fill_(-1.0)
    before = _snapshot(target)
    assert weights.pull(target, 1) == 1
    assert _unchanged(target, before)


def test_pull_after_new_publish_updates():
    weights = SharedPolicyWeights(model_numel(Net()))
    source, target = Net(), Net()
    weights.publish(source, version=1)
    weights.pull(target, -1)
    with torch.no_grad():
        for t in source.tensors():
            t.fill_(0.25)
    weights.publish(source, version=2)
    assert weights.pull(target, 1) == 2
    assert all((t == 0.25).all() for t in target.tensors())


def test_torn_read_is_retried_and_model_left_unchanged():
    weights = SharedPolicyWeights(model_numel(Net()))
    source, target = Net(), Net()
    weights.publish(source, version=1)
    before = _snapshot(target)
    # the learner starts publishing version 2: sequence number odd, data half written
    weights.header[0] += 1
    weights.flat[: weights.flat.numel() // 2] = 123.0
    assert int(weights.header[0]) % 2 == 1
    assert weights.pull(target, -1, max_tries=20) == -1
    assert _unchanged(target, before)
    # a reader that already has version 1 keeps it (header[1] still says 1)
    assert weights.pull(target, 1) == 1
    assert _unchanged(target, before)
    # the write completes: the reader now gets the new, consistent data
    weights.flat.fill_(2.0)
    weights.header[1] = 2
    weights.header[0] += 1
    assert weights.pull(target, 1) == 2
    assert all((t == 2.0).all() for t in target.tensors())


def test_pull_retries_when_sequence_changes_during_copy():
    """A publication that completes while the reader copies must not be applied."""
    weights = SharedPolicyWeights(model_numel(Net()))
    source, target = Net(), Net()
    weights.publish(source, version=1)
    before = _snapshot(target)
    real_clone = torch.Tensor.clone
    calls = []

    class FlatProxy:
        """Wraps `flat` so that every copy coincides with a concurrent publication."""

        def __init__(self, flat):
            self._flat = flat

        def clone(self):
            calls.append(1)
            snapshot = real_clone(self._flat)
            weights.header[0] += 2  # a whole publication happened meanwhile
            return snapshot

    weights.flat = FlatProxy(weights.flat)
    assert weights.pull(target, -1, max_tries=5) == -1
    assert len(calls) == 5
    assert _unchanged(target, before)


# --- across processes: the sequence lock under a real concurrent writer ----------------------
@pytest.fixture
def spawnable(monkeypatch):
    """Spawned children unpickle this module's functions by module name: make it importable
    (plain `pytest` does not put the rootdir on sys.path; the child inherits the parent's)."""
    root = Path(__file__).resolve().parents[len(__name__.split(".")) - 1]
    monkeypatch.syspath_prepend(str(root))


class BigNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(512, 512)
        self.b = nn.Linear(512, 256)
        self.register_buffer("stat", torch.zeros(4096))

    def tensors(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.parameters()] + list(self.buffers())


LAST_VERSION = 200
PUBLISH_PAUSE = 0.0002  # seconds between publications


def _publisher(weights: SharedPolicyWeights, started, go, device: str) -> None:
    torch.set_num_threads(1)
    model = BigNet().to(device)
    started.set()
    go.wait(timeout=60)  # start publishing only once the reader is pulling
    for version in range(1, LAST_VERSION + 1):
        with torch.no_grad():
            for t in model.tensors():
                t.fill_(float(version))
        weights.publish(model, version)
        time.sleep(PUBLISH_PAUSE)
    weights.release_shared()  # let go before exiting, as the components do (no IPC warning)


@pytest.fixture
def one_torch_thread():
    """Two busy-waiting OpenMP threads per process on a 2-core machine make every copy ~100x
    slower, so the reader would hardly ever overlap a publication; the components run with
    one thread too (component_process)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_concurrent_pulls_are_never_torn(spawnable, one_torch_thread, device):
    # On CUDA the flat tensor reaches the publisher through CUDA IPC, as it reaches the
    # inference workers.
    weights = SharedPolicyWeights(model_numel(BigNet()), device=device)
    ctx = torch_mp.get_context("spawn")
    started, go = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_publisher, args=(weights, started, go, device), daemon=True)
    proc.start()
    model = BigNet().to(device)
    try:
        deadline = time.monotonic() + 60
        while not started.wait(timeout=0.05):
            assert proc.is_alive(), f"publisher died on start (exit code {proc.exitcode})"
            assert time.monotonic() < deadline, "publisher did not start"
        go.set()
        have = -1
        pulled = []
        deadline = time.monotonic() + 60
        while have < LAST_VERSION and time.monotonic() < deadline:
            version = weights.pull(model, have)
            if version != have:
                values = torch.cat([t.reshape(-1) for t in model.tensors()])
                lo, hi = float(values.min()), float(values.max())
                assert lo == hi == float(version), (
                    f"torn read: pulled version {version} holds values in [{lo}, {hi}]"
                )
                assert version > have
                pulled.append(version)
                have = version
            elif not proc.is_alive() and weights.version == have:
                break  # the publisher is gone and there is nothing new to pull
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        weights.release_shared()  # the producer frees its share last, as Runner.close does
    assert proc.exitcode == 0
    assert have == LAST_VERSION, pulled
    assert len(pulled) >= 3, pulled  # the reader really ran concurrently with the writer
    assert weights.version == LAST_VERSION


def _pull_then_exit(weights: SharedPolicyWeights, release: bool) -> None:
    model = BigNet().to(weights.flat.device)
    weights.pull(model, -1)
    if release:
        weights.release_shared()


@pytest.mark.gpu
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "reader_releases,producer_releases,warns",
    [(False, True, True), (True, False, True), (True, True, False)],
)
def test_the_producer_exits_without_ipc_warning_once_both_sides_let_go(
    reader_releases, producer_releases, warns
):
    # Torch warns at the producer's exit (here a fresh interpreter, in a run the runner) while
    # a CUDA tensor it shared is still allocated there, or was freed while a reader still
    # mapped it. A reader that only drops its references when it exits does not let go.
    # Measured on an H100 (2026-11-27, docs/benchmarks.md): a reader that let go (torch's
    # counter for it back at 0) with a producer that kept its tensor warned in 3 runs of 3.
    # The producer releasing after the join is what `Runner.close` now does.
    root = Path(__file__).resolve().parents[len(__name__.split(".")) - 1]
    program = f"""
import torch.multiprocessing as mp
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from {__name__} import BigNet, _pull_then_exit

if __name__ == "__main__":
    weights = SharedPolicyWeights(model_numel(BigNet()), "cuda")
    weights.publish(BigNet().cuda(), 1)
    reader = mp.get_context("spawn").Process(
        target=_pull_then_exit, args=(weights, {reader_releases})
    )
    reader.start()
    reader.join()
    assert reader.exitcode == 0, reader.exitcode
    if {producer_releases}:
        weights.release_shared()
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert ("shared CUDA tensors released" in done.stderr) == warns, done.stderr


def test_release_empties_the_tensors_but_keeps_the_version():
    weights = SharedPolicyWeights(model_numel(Net()))
    weights.publish(Net(), 3)
    weights.release_shared()
    assert weights.flat.numel() == weights.exact.numel() == 0
    assert weights.version == 3


# --- known bugs -------------------------------------------------------------------------------
def test_version_is_minus_one_while_first_publish_in_progress():
    weights = SharedPolicyWeights(model_numel(Net()))
    weights.header[0] += 1  # first publication started, not finished
    assert weights.version == -1


def test_int64_buffer_survives_publish_and_pull():
    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    source, target = Counted(), Counted()
    source.count.fill_(2**24 + 1)
    weights = SharedPolicyWeights(model_numel(source))
    weights.publish(source, version=1)
    assert weights.pull(target, -1) == 1
    assert int(target.count) == 2**24 + 1
