"""Policy parameters published by a learner and read by inference workers, through shared memory.

The learner copies its model's parameters and buffers (normaliser statistics included) into one
flat tensor after every SGD step; inference workers copy them out before their next batch if the
version changed, without waiting for the learner (paper sec. 3.4: a typical update takes well
under a millisecond). The flat tensor lives on the learner's device: host shared memory on CPU,
and on CUDA a device tensor that inference workers map through CUDA IPC.

Concurrent reads and writes are made safe by a sequence lock: the writer makes the sequence
number odd while it writes and even when done; a reader retries if the number was odd or
changed while it copied. Readers never block the writer.
"""

from __future__ import annotations

import torch
from torch import nn


def _tensors_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.data for p in model.parameters()] + [b for b in model.buffers()]


def _split_by_kind(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(floating-point tensors, the others): integer buffers such as a normaliser's sample
    count travel as float64, which holds them exactly up to 2**53; float32 would round them."""
    tensors = _tensors_of(model)
    return (
        [t for t in tensors if t.is_floating_point()],
        [t for t in tensors if not t.is_floating_point()],
    )


def model_numel(model: nn.Module) -> tuple[int, int]:
    """(floating-point elements, other elements) of the model's parameters and buffers."""
    floats, others = _split_by_kind(model)
    return sum(t.numel() for t in floats), sum(t.numel() for t in others)


class SharedPolicyWeights:
    """A versioned, lock-free snapshot of one policy's weights (see module docstring)."""

    def __init__(self, numel: tuple[int, int], device: torch.device | str = "cpu"):
        float_numel, exact_numel = numel
        self.flat = torch.zeros(float_numel, dtype=torch.float32, device=device)
        self.exact = torch.zeros(exact_numel, dtype=torch.float64, device=device)
        self.on_cuda = self.flat.device.type == "cuda"
        if not self.on_cuda:
            self.flat.share_memory_()
            self.exact.share_memory_()
        # [sequence number, policy version]: always host memory, read on every inference batch.
        self.header = torch.zeros(2, dtype=torch.int64).share_memory_()

    @property
    def version(self) -> int:
        """Policy version (SGD steps) of the last completed publication; -1 before the first."""
        return int(self.header[1]) if int(self.header[0]) >= 2 else -1

    def publish(self, model: nn.Module, version: int) -> None:
        """Copy `model`'s parameters and buffers in, stamped with `version`. Learner only."""
        self.header[0] += 1  # odd: write in progress
        with torch.no_grad():
            for flat, tensors in zip((self.flat, self.exact), _split_by_kind(model)):
                offset = 0
                for tensor in tensors:
                    n = tensor.numel()
                    flat[offset : offset + n].copy_(tensor.reshape(-1))
                    offset += n
            if self.on_cuda:
                torch.cuda.current_stream(self.flat.device).synchronize()
        self.header[1] = version
        self.header[0] += 1  # even: consistent

    def pull(self, model: nn.Module, have_version: int, max_tries: int = 100) -> int:
        """Copy weights into `model` if newer than `have_version`; returns the version it has.

        A torn read (the learner published meanwhile) is retried; after `max_tries` the model
        is left as it was, which only means acting one batch longer with older weights.
        """
        for _ in range(max_tries):
            seq = int(self.header[0])
            version = int(self.header[1])
            if seq == 0 or version == have_version:
                return have_version
            if seq % 2:
                continue
            snapshots = (self.flat.clone(), self.exact.clone())
            if self.on_cuda:
                # The copy is only queued: it must be done before the sequence number is read
                # again, or a publication that starts meanwhile could tear it unnoticed.
                torch.cuda.current_stream(snapshots[0].device).synchronize()
            if int(self.header[0]) != seq:
                continue
            self._unflatten_into(model, snapshots)
            return version
        return have_version

    def release_shared(self) -> None:
        """Let go of the shared tensors in this process: it is done with them.

        On CUDA they are the runner's, mapped into the components through IPC, and torch
        warns at the runner's exit ("Producer process has been terminated before all shared
        CUDA tensors released") unless every component let go first and then the runner
        freed its own. Explicit, because whatever still refers to this object when a process
        ends would keep the tensors alive. Component processes call it on exit
        (`comms.component_process`), the runner at close (`Wiring.release_shared_tensors`).
        """
        self.flat = self.flat.new_empty(0)
        self.exact = self.exact.new_empty(0)

    @staticmethod
    def _unflatten_into(model: nn.Module, snapshots: tuple[torch.Tensor, torch.Tensor]) -> None:
        with torch.no_grad():
            for flat, tensors in zip(snapshots, _split_by_kind(model)):
                offset = 0
                for tensor in tensors:
                    n = tensor.numel()
                    tensor.copy_(flat[offset : offset + n].view_as(tensor))
                    offset += n
