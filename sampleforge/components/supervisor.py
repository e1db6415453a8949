"""The runner's recovery policy: what happens when a component dies or hangs.

| component | dies without a word (SIGKILL, OOM, segfault) | hangs | raises |
| --- | --- | --- | --- |
| rollout worker | replaced; its slots are reclaimed after a quarantine, and its learners asked about the slots it handed over (a message lost with it frees its slot); its partial trajectories are never trained on | killed after `env_step_timeout_sec` without a heartbeat, then replaced | the run fails with its traceback |
| inference worker | replaced; rollout workers re-send the requests it held | — | the run fails |
| learner | the run fails; the last checkpoint is intact | — | the run fails |
| evaluation worker | the run fails (evaluation was asked for; a silent gap in it would mislead) | — | the run fails |

Deaths are seen through process sentinels on every runner loop (well under a second), not
only through heartbeats. More than `max_component_restarts` replacements fail the run.

Must not: decide when training ends, or touch learning state.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from sampleforge.comms.hosts import ComponentSpec
from sampleforge.comms.messages import HandOverCheck, ResendRequests, Resume, Stop
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

    def __init__(
        self,
        *,
        cfg,
        host,
        wiring,
        is_training: Callable[[], bool],
        has_started: Callable[[str], bool] = lambda name: True,
    ):
        self.cfg = cfg
        self.host = host
        self.wiring = wiring
        self.is_training = is_training
        self.has_started = has_started  # whether a component has reported its start
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

    def stop_all(self, timeout: float) -> None:
        """Ask every live component to stop; terminate those still running after `timeout`."""
        dead = self.host.dead()
        for spec in self.current_specs():
            if spec.name in dead:
                continue  # never signal the queue of a killed process (it may block forever)
            try:
                send_many(spec.control_queue, [Stop()], timeout=1.0)
            except Exception:  # noqa: BLE001 - a full queue must not stop the shutdown
                pass
        forced = self.host.join_all(timeout)
        if forced:
            log.warning("had to terminate components that did not stop: %s", ", ".join(forced))

    def health_metrics(self) -> dict[str, float]:
        return {f"health/{kind}_restarts": float(n) for kind, n in self.restarts.items()}

    # --- policy ---------------------------------------------------------------------------------
    def _on_death(self, name: str, code: int) -> None:
        kind = self.specs[name].kind
        if kind not in self.restarts:
            if not self.has_started(name):
                # Before its start nothing was trained since the checkpoint, and the same
                # command would fail the same way: what to read is what the process printed.
                raise ComponentDied(
                    f"{name} exited while starting (exit code {code}), before it could report "
                    "an error: what it printed above says why"
                )
            raise ComponentDied(
                f"{name} died (exit code {code}); the run cannot continue without "
                "it. The last checkpoint is intact: run the same command to "
                "resume."
            )
        self.restarts[kind] += 1
        if self.restarts[kind] > self.cfg.max_component_restarts:
            raise ComponentDied(
                f"{name} died (exit code {code}) after {self.restarts[kind] - 1} "
                f"replacements of {kind}s (max_component_restarts="
                f"{self.cfg.max_component_restarts})"
            )
        log.warning("%s died (exit code %s); replacing it", name, code)
        if kind == "rollout_worker":
            self._replace_rollout_worker(name)
        else:
            self.host.start(self.specs[name])
            for w in range(self.cfg.num_workers):
                send_many(self.wiring.rollout_inbox(w), [ResendRequests()])

    def _replace_rollout_worker(self, name: str) -> None:
        worker = self.specs[name].index
        generation = self.wiring.ledger.retire(worker)
        spec = self.wiring.rollout_worker_spec(worker, generation)
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
        slots = self.wiring.slots.reclaim(worker)
        log.info("reclaimed %d trajectory slots of rollout worker %d", len(slots), worker)
        self._check_unread_hand_overs(worker)

    def _check_unread_hand_overs(self, worker: int) -> None:
        """Ask each learner yet to copy a slot the dead `worker` handed over whether its
        message came (see `HandOverCheck`): one lost would leave that learner waiting for it,
        and sampling held back by it, for ever."""
        policy_ids = self.wiring.buffer.policy_ids
        for slot, hand_over, readers in self.wiring.ledger.unread_hand_overs(worker):
            # The returner is the lowest trained policy that acted, as the worker chose it.
            acted = set(policy_ids[slot, :-1].unique().tolist())
            returner = min(p for p in self.wiring.learner_inboxes if p in acted)
            for policy in readers:
                check = HandOverCheck(policy, slot, hand_over, returns_slot=policy == returner)
                send_many(self.wiring.learner_inboxes[policy], [check])

    def _kill_hung_workers(self) -> None:
        if self.cfg.serial_mode:
            return  # one thread: a hung env hangs everything, nothing to watch from
        replacing = {p.worker for p in self._pending}
        for name, spec in self.specs.items():
            w = spec.index
            if spec.kind != "rollout_worker" or w in replacing:
                continue
            silent = self.wiring.ledger.seconds_since_beat(w)
            if silent > self.cfg.env_step_timeout_sec:
                log.warning(
                    "%s made no progress for %.1f s (an env step hung?); killing it", name, silent
                )
                self.host.kill(name)
