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


def model_numel(model: nn.Module) -> int:
    return sum(t.numel() for t in _tensors_of(model))


class SharedPolicyWeights:
    """A versioned, lock-free snapshot of one policy's weights (see module docstring)."""

    def __init__(self, numel: int, device: torch.device | str = "cpu"):
        self.flat = torch.zeros(numel, dtype=torch.float32, device=device)
        if self.flat.device.type == "cpu":
            self.flat.share_memory_()
        # [sequence number, policy version]: always host memory, read on every inference batch.
        self.header = torch.zeros(2, dtype=torch.int64).share_memory_()

    @property
    def version(self) -> int:
        """Policy version (SGD steps) of the last completed publication; -1 before the first."""
        return int(self.header[1]) if int(self.header[0]) > 0 else -1

    def publish(self, model: nn.Module, version: int) -> None:
        """Copy `model`'s parameters and buffers in, stamped with `version`. Learner only."""
        self.header[0] += 1  # odd: write in progress
        offset = 0
        with torch.no_grad():
            for tensor in _tensors_of(model):
                n = tensor.numel()
                self.flat[offset:offset + n].copy_(tensor.reshape(-1), non_blocking=False)
                offset += n
            if self.flat.device.type == "cuda":
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
            snapshot = self.flat.clone()
            if int(self.header[0]) != seq:
                continue
            self._unflatten_into(model, snapshot)
            return version
        return have_version

    @staticmethod
    def _unflatten_into(model: nn.Module, flat: torch.Tensor) -> None:
        offset = 0
        with torch.no_grad():
            for tensor in _tensors_of(model):
                n = tensor.numel()
                tensor.copy_(flat[offset:offset + n].view_as(tensor))
                offset += n
