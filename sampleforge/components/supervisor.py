"""The runner's recovery policy: what happens when a component dies or hangs.

| component | dies without a word (SIGKILL, OOM, segfault) | hangs | raises |
| --- | --- | --- | --- |
| rollout worker | replaced; its slots are reclaimed after a quarantine; its partial trajectories are never trained on | killed after `env_step_timeout_sec` without a heartbeat, then replaced | the run fails with its traceback |
| inference worker | replaced; rollout workers re-send the requests it held | — | the run fails |
| learner | the run fails; the last checkpoint is intact | — | the run fails |

Deaths are seen through process sentinels on every runner loop (well under a second), not
only through heartbeats. More than `max_component_restarts` replacements fail the run.

Must not: decide when training ends, or touch learning state.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable

from sampleforge.comms.hosts import ComponentSpec
from sampleforge.comms.messages import ResendRequests, Resume
from sampleforge.comms.queues import send_many

log = logging.getLogger(__name__)

# Long enough for any inference batch that read a dead worker's generation before it was
# retired to finish writing into that worker's slots.
QUARANTINE_SEC = 1.0


class ComponentDied(RuntimeError):
    """A component the run cannot do without died, or too many had to be replaced."""


@dataclass
class _PendingReplacement:
    spec: ComponentSpec
    worker: int
    due: float


class Supervisor:
    """Watches the host's processes and the ledger's heartbeats; replaces what can be replaced."""

    def __init__(self, *, cfg, host, wiring, is_training: Callable[[], bool]):
        self.cfg = cfg
        self.host = host
        self.wiring = wiring
        self.is_training = is_training
        self.specs = {spec.name: spec for spec in wiring.specs}
        self.restarts = {"rollout_worker": 0, "inference_worker": 0}
        self._pending: list[_PendingReplacement] = []

    def check(self) -> None:
        """Handle deaths and hangs seen now, and replacements whose quarantine is over."""
        self._kill_hung_workers()
        replacing = {p.spec.name for p in self._pending}
        for name, code in self.host.dead().items():
            if name not in replacing:
                self._on_death(name, code)
        self._start_due_replacements()

    def current_specs(self) -> list[ComponentSpec]:
        """The spec of every component as it runs now (replacements included)."""
        return list(self.specs.values())

    def health_metrics(self) -> dict[str, float]:
        return {f"health/{kind}_restarts": float(n) for kind, n in self.restarts.items()}

    # --- policy ---------------------------------------------------------------------------------
    def _on_death(self, name: str, code: int) -> None:
        kind = _kind(name)
        if kind not in self.restarts:
            raise ComponentDied(f"{name} died (exit code {code}); the run cannot continue without "
                                "it. The last checkpoint is intact: run the same command to "
                                "resume.")
        self.restarts[kind] += 1
        if self.restarts[kind] > self.cfg.max_component_restarts:
            raise ComponentDied(f"{name} died (exit code {code}) after {self.restarts[kind] - 1} "
                                f"replacements of {kind}s (max_component_restarts="
                                f"{self.cfg.max_component_restarts})")
        log.warning("%s died (exit code %s); replacing it", name, code)
        if kind == "rollout_worker":
            self._replace_rollout_worker(name)
        else:
            self.host.start(self.specs[name])
            for w in range(self.cfg.num_workers):
                send_many(self.wiring.rollout_inbox(w), [ResendRequests()])

    def _replace_rollout_worker(self, name: str) -> None:
        spec = self.specs[name]
        worker = spec.kwargs["worker_index"]
        generation = self.wiring.ledger.retire(worker)
        inbox = self.wiring.rollout_inboxes[worker][generation]  # a fresh one, never used
        spec = dataclasses.replace(spec, control_queue=inbox, kwargs={
            **spec.kwargs, "generation": generation, "inbox": inbox})
        self.specs[name] = spec
        self._pending.append(_PendingReplacement(spec, worker, time.monotonic() + QUARANTINE_SEC))

    def _start_due_replacements(self) -> None:
        now = time.monotonic()
        due = [p for p in self._pending if p.due <= now]
        self._pending = [p for p in self._pending if p.due > now]
        for p in due:
            self._reclaim_slots(p.worker)
            self.host.start(p.spec)
            if self.is_training():
                send_many(p.spec.control_queue, [Resume()])

    def _reclaim_slots(self, worker: int) -> None:
        ledger = self.wiring.ledger
        slots = ledger.slots_of(worker)
        for slot in slots:
            ledger.release(slot)
        send_many(self.wiring.free_slots, slots)
        log.info("reclaimed %d trajectory slots of rollout worker %d", len(slots), worker)

    def _kill_hung_workers(self) -> None:
        if self.cfg.serial_mode:
            return  # one thread: a hung env hangs everything, nothing to watch from
        replacing = {p.worker for p in self._pending}
        for w in range(self.cfg.num_workers):
            silent = self.wiring.ledger.seconds_since_beat(w)
            if w not in replacing and silent > self.cfg.env_step_timeout_sec:
                log.warning("rollout_worker_%d made no progress for %.1f s (an env step hung?); "
                            "killing it", w, silent)
                self.host.kill(f"rollout_worker_{w}")


def _kind(name: str) -> str:
    if name.startswith("rollout_worker"):
        return "rollout_worker"
    if name.startswith("inference_worker"):
        return "inference_worker"
    return name
