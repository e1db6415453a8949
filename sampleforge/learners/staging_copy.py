"""How trajectory rows reach a learner's staging areas on its device.

Responsible for: every write into the batcher's staging tensors. On the CPU that is a plain
copy. On CUDA the rows of a slot are first copied into pinned host memory (one of two bounce
buffers, so the next slot's host copy overlaps the last one's transfer) and from there to the
device on a copy stream of their own, so the transfer neither waits for the SGD steps queued
on the compute stream nor holds up the ones queued after it (seed 003 names the CPU-to-GPU
copy as its learner's bottleneck; the paper stages data in the background for the same
reason). Copies from shared memory, which is pageable, would otherwise be synchronous and
ordered behind every queued kernel.

The two streams meet in two places: the compute stream waits for the copy stream before it
reads a dataset (`before_reading`), and the copy stream waits for the compute stream before
it overwrites an area the last dataset was trained from (`before_overwriting`).

Must not: decide what goes where (the batcher does); it only moves tensors.
"""

from __future__ import annotations

import torch


class StagingCopy:
    """Copies into staging tensors on `device`; `slot_shapes` are one slot's fields
    (`[T + 1, rows_per_slot, ...]` and dtype), what a bounce buffer must hold."""

    def __init__(
        self, device: torch.device, slot_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]
    ):
        self.device = device
        self.stream: torch.cuda.Stream | None = None
        if device.type != "cuda":
            return
        self.stream = torch.cuda.Stream(device)
        self._bounce = [
            {
                name: torch.empty(shape, dtype=dtype, pin_memory=True)
                for name, (shape, dtype) in slot_shapes.items()
            }
            for _ in range(2)
        ]
        self._in_flight: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def copy(self, targets: dict[str, torch.Tensor], rows: dict[str, torch.Tensor]) -> None:
        """`targets[name] <- rows[name]` for every field (same shapes)."""
        if self.stream is None:
            for name, part in rows.items():
                targets[name].copy_(part)
            return
        bounced = all(part.device.type == "cpu" for part in rows.values()) and self._fits(rows)
        if bounced:
            rows = self._through_pinned_memory(rows)
        with torch.cuda.stream(self.stream):
            for name, part in rows.items():
                targets[name].copy_(part, non_blocking=True)
        if bounced:
            self._bounce_in_flight()

    def before_reading(self) -> None:
        """The compute stream is about to read staged rows: it waits for the copies."""
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def before_overwriting(self) -> None:
        """Rows the compute stream read may be overwritten next: the copies wait for it."""
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def _fits(self, rows: dict[str, torch.Tensor]) -> bool:
        bounce = self._bounce[self._turn]
        return all(part.shape[1] <= bounce[name].shape[1] for name, part in rows.items())

    def _through_pinned_memory(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`rows` copied into the next bounce buffer, once its last transfer is done."""
        last = self._in_flight[self._turn]
        if last is not None:
            last.synchronize()
        bounce = self._bounce[self._turn]
        pinned = {name: bounce[name][:, : part.shape[1]] for name, part in rows.items()}
        for name, part in rows.items():
            pinned[name].copy_(part)
        return pinned

    def _bounce_in_flight(self) -> None:
        """Record when the transfer from this bounce buffer ends; the next copy uses the other."""
        event = torch.cuda.Event()
        event.record(self.stream)
        self._in_flight[self._turn] = event
        self._turn ^= 1
