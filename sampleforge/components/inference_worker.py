"""Inference worker: batched action generation for one policy (paper sec. 3.1, "policy worker").

It takes every request waiting in its policy's queue, from any rollout worker, gathers the
observations and recurrent states of the rows its policy plays (the slot's `policy_ids`) in one
indexing operation, runs one forward pass on its device, samples actions and writes actions,
log-probs, values, the policy version and the next recurrent state back in place. It is stateless apart from its
copy of the weights, so any number of them can serve one policy.

Before each batch it picks up the learner's newest weights if the version changed, without
waiting for the learner.

Must not: step environments, compute gradients, or hold trajectory data between batches.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.shared_weights import SharedPolicyWeights
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.comms.messages import (
    ActionsReady,
    InferenceReport,
    InferenceRequested,
    Pause,
    Resume,
    Stop,
)
from sampleforge.comms.queues import receive, send_many
from sampleforge.config.ranges import inference_seed
from sampleforge.models.policy import Policy

REPORT_EVERY_SEC = 1.0


@dataclass(frozen=True)
class InferenceEndpoints:
    """What an inference worker reads and writes; built by the wiring."""

    buffer: SharedTrajectoryBuffer
    weights: SharedPolicyWeights  # its policy's, published by the learner
    ledger: SamplerLedger  # rollout workers' generations
    request_queue: Any  # its policy's inference requests (shared by its inference workers)
    control_queue: Any
    rollout_inboxes: list[list[Any]]  # [worker][generation]
    report_queue: Any


class InferenceWorker:
    """Serves action requests for one policy; see the module docstring."""

    def __init__(
        self,
        *,
        policy_id: int,
        index: int,
        endpoints: InferenceEndpoints,
        model_factory: Callable[[], Policy],
        device: torch.device,
        seed: int | None = None,
        sole_policy: bool = False,
        splits_per_worker: int = 1,
    ):
        self.name = f"inference_worker_p{policy_id}_{index}"
        if seed is not None:
            torch.manual_seed(inference_seed(seed, policy_id, index))
        self.policy_id = policy_id
        self.sole_policy = sole_policy  # the only policy of the run: it acts for every row
        self.splits_per_worker = splits_per_worker  # to number the sampler's env rows
        self.model = model_factory().to(device).eval()
        self.buffer = endpoints.buffer
        self.weights = endpoints.weights
        self.ledger = endpoints.ledger
        self.request_queue = endpoints.request_queue
        self.control_queue = endpoints.control_queue
        self.rollout_inboxes = endpoints.rollout_inboxes
        self.report_queue = endpoints.report_queue
        self.device = device
        self.version = -1
        self.running = True
        self._batches = 0
        self._samples = 0
        self._timings = {"forward": 0.0, "weights": 0.0}
        self._last_report = time.monotonic()

    def poll(self, timeout: float) -> None:
        """Serve every waiting request (waiting up to `timeout` s for the first)."""
        for msg in receive(self.control_queue, 0):
            self._handle_control(msg)
        requests = self._current(self._receive_requests(timeout))
        if requests:
            self._serve(requests)
        self._maybe_report()

    def close(self) -> None:
        pass

    def snapshot_state(self) -> dict:
        """The weights it acts with (maybe older than the newest published), for an exact
        resume."""
        return {"model": self.model.state_dict(), "version": self.version}

    def restore_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.version = state["version"]

    def _handle_control(self, msg) -> None:
        if isinstance(msg, Stop):
            self.running = False
        elif not isinstance(msg, (Pause, Resume)):  # nothing to pause: requests just stop
            raise TypeError(f"{self.name}: unexpected message {msg!r}")

    def _receive_requests(self, timeout: float) -> list[InferenceRequested]:
        """Requests waiting now, or arriving within `timeout`.

        The request queue is a `DoorbellQueue`: this sleeps on a pipe that rollout workers
        ring, never on a condition variable a killed process could leave unusable.
        """
        return receive(self.request_queue, timeout)

    def _current(self, requests: list[InferenceRequested]) -> list[InferenceRequested]:
        """Drop requests of replaced rollout workers: their slots may belong to others now."""
        generations = self.ledger.generations.tolist()
        return [r for r in requests if r.generation == generations[r.worker]]

    def _serve(self, requests: list[InferenceRequested]) -> None:
        t0 = time.perf_counter()
        self._pull_weights()
        t1 = time.perf_counter()
        index, request_of_row = self._rows_of_this_policy(requests)
        with torch.inference_mode():
            obs = {
                key: self._gather(tensor, index).to(self.device, non_blocking=True)
                for key, tensor in self.buffer.obs.items()
            }
            rnn_states = self._gather(self.buffer.rnn_states, index).to(
                self.device, non_blocking=True
            )
            env_ids = None
            if self.model.explores_per_env:
                env_ids = self._env_ids(requests, request_of_row, index[2]).to(self.device)
            out = self.model.act(obs, rnn_states, env_ids=env_ids)
            if self.device.type == "cuda":  # the writes wait for it anyway; the check must too
                torch.cuda.synchronize(self.device)
            # A worker replaced while the batch ran may have had its slots reclaimed and given
            # to another worker: never write into them (checked again here, just before the
            # writes, however long the forward pass took).
            current = self._current(requests)
            if not current:
                return  # every worker of the batch was replaced meanwhile: nothing to write
            if len(current) < len(requests):
                keep = torch.tensor([r in current for r in requests])[request_of_row]
                slots, steps, rows = index
                index = (slots[keep], steps[keep], rows[keep])
                out = type(out)(*(t[keep.to(t.device)] for t in out))  # an ActOutput
                requests = current
            self._scatter(index, out)
        self._timings["weights"] += t1 - t0
        self._timings["forward"] += time.perf_counter() - t1
        self._batches += 1
        self._samples += len(index[0])
        self._notify(requests)

    def _rows_of_this_policy(
        self, requests: list[InferenceRequested]
    ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        """(slots, steps, rows) of every row this policy acts for in the requested steps, and
        the request each row belongs to."""
        slots = torch.tensor([r.slot for r in requests], dtype=torch.long)
        steps = torch.tensor([r.step for r in requests], dtype=torch.long)
        if self.sole_policy:  # every row is ours: no need to read policy_ids
            rows_per_slot = self.buffer.layout.rows_per_slot
            request_index = torch.arange(len(requests)).repeat_interleave(rows_per_slot)
            rows = torch.arange(rows_per_slot).repeat(len(requests))
        else:
            mine = self.buffer.policy_ids[slots, steps] == self.policy_id  # [requests, rows]
            request_index, rows = mine.nonzero(as_tuple=True)
        return (slots[request_index], steps[request_index], rows), request_index

    def _env_ids(
        self, requests: list[InferenceRequested], request_of_row: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor:
        """The sampler-wide index of each row's env-agent (a policy may explore per env)."""
        rows_per_slot = self.buffer.layout.rows_per_slot
        first = torch.tensor(
            [(r.worker * self.splits_per_worker + r.split) * rows_per_slot for r in requests],
            dtype=torch.long,
        )
        return first[request_of_row] + rows

    @staticmethod
    def _gather(tensor: torch.Tensor, index: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """`tensor[slots, steps, rows]` of a buffer tensor `[slots, steps, rows, ...]`.

        One `index_select` over the flattened rows copies each row as a block; indexing with
        three index tensors goes element by element (for a batch of 32 Atari observations,
        30 us instead of 570 us).
        """
        slots, steps, rows = index
        num_steps, num_rows = tensor.shape[1], tensor.shape[2]
        flat = (slots * num_steps + steps) * num_rows + rows
        return tensor.flatten(0, 2).index_select(0, flat)

    def _pull_weights(self, first_weights_timeout_sec: float = 60.0) -> None:
        self.version = self.weights.pull(self.model, self.version)
        deadline = time.monotonic() + first_weights_timeout_sec
        while self.version < 0:  # only before the learner's first publication
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no weights published by the learner within "
                    f"{first_weights_timeout_sec:.0f} s"
                )
            time.sleep(0.01)
            self.version = self.weights.pull(self.model, self.version)

    def _scatter(self, index: tuple[torch.Tensor, ...], out) -> None:
        buf = self.buffer
        slots, steps, rows = index
        buf.actions[index] = out.actions.reshape(len(rows), -1).to("cpu", buf.actions.dtype)
        buf.log_probs[index] = out.log_probs.float().cpu()
        buf.values[index] = out.values.float().cpu()
        buf.policy_versions[index] = self.version
        buf.rnn_states[slots, steps + 1, rows] = out.new_rnn_states.cpu()

    def _notify(self, requests: list[InferenceRequested]) -> None:
        by_inbox: dict[tuple[int, int], list[ActionsReady]] = defaultdict(list)
        for r in requests:
            by_inbox[(r.worker, r.generation)].append(ActionsReady(r.split, r.step, self.policy_id))
        for (worker, generation), messages in by_inbox.items():
            send_many(self.rollout_inboxes[worker][generation], messages)

    def _maybe_report(self) -> None:
        now = time.monotonic()
        if now - self._last_report < REPORT_EVERY_SEC:
            return
        if not self._batches:
            # Idle (the sampler paused between `train` calls, when nobody reads the report
            # queue): a report a second would fill it. The timings wait for the next report.
            return
        send_many(
            self.report_queue,
            [InferenceReport(self.name, self._batches, self._samples, dict(self._timings))],
        )
        self._batches = self._samples = 0
        self._timings = {k: 0.0 for k in self._timings}
        self._last_report = now
