"""The supervisor alone, over a real wiring, with a fake host and a fake clock.

The fake host plays the processes: the test says which component died (or what exit code it
had), and reads what the supervisor started and killed. The wiring is the real one (its shared
ledger, slot pool and queues), so the test sees replacement specs, generations, reclaimed slots
and the messages sent to each component's queue exactly as the components would.
"""

from __future__ import annotations

import dataclasses
import time
import types

import pytest
import torch

from sampleforge.checkpoint.experiment_dir import prepare_experiment
from sampleforge.comms.messages import HandOverCheck, ResendRequests, Resume, Stop
from sampleforge.comms.queues import receive
from sampleforge.components import supervisor as supervisor_module
from sampleforge.components.supervisor import QUARANTINE_SEC, ComponentDied, Supervisor
from sampleforge.components.wiring import wire
from sampleforge.config import make_config
from sampleforge.envs.registry import env_info, resolve_env

TIMEOUT_SEC = 10.0  # env_step_timeout_sec of these runs


class FakeHost:
    """What the supervisor needs of a host: dead(), start(spec), kill(name), join_all(timeout)."""

    def __init__(self):
        self.started: list = []
        self.killed: list[str] = []
        self.joined: list[float] = []
        self._dead: dict[str, int] = {}

    def die(self, name: str, code: int = -9) -> None:
        self._dead[name] = code

    def dead(self) -> dict[str, int]:
        return dict(self._dead)

    def start(self, spec) -> None:  # a new process of that name: no longer dead
        self.started.append(spec)
        self._dead.pop(spec.name, None)

    def kill(self, name: str) -> None:
        self.killed.append(name)
        self._dead[name] = -9

    def join_all(self, timeout: float) -> list[str]:
        self.joined.append(timeout)
        return []


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Setup:
    def __init__(self, tmp_path, monkeypatch, **overrides):
        settings = dict(
            env="CartPole-v1",
            train_dir=str(tmp_path),
            num_workers=2,
            num_envs_per_worker=2,
            worker_num_splits=2,
            rollout=8,
            batch_size=32,
            max_component_restarts=2,
            env_step_timeout_sec=TIMEOUT_SEC,
            device="cpu",
            seed=0,
        )
        settings.update(overrides)
        self.cfg = make_config(**settings)
        exp, resume = prepare_experiment(self.cfg)
        self.wiring = wire(
            self.cfg,
            resolve_env(self.cfg.env),
            env_info(self.cfg.env),
            torch.device("cpu"),
            exp,
            resume,
        )
        self.host = FakeHost()
        self.clock = Clock()
        monkeypatch.setattr(
            supervisor_module, "time", types.SimpleNamespace(monotonic=self.clock.monotonic)
        )
        self.training = True
        self.not_started: set[str] = set()  # components the run has not heard start from
        self.supervisor = Supervisor(
            cfg=self.cfg,
            host=self.host,
            wiring=self.wiring,
            is_training=lambda: self.training,
            has_started=lambda name: name not in self.not_started,
        )
        now = time.time()
        for w in range(self.cfg.num_workers):  # every worker made progress just now
            self.wiring.ledger.heartbeats[w] = now

    def spec(self, name: str):
        return next(s for s in self.supervisor.current_specs() if s.name == name)

    def wait_quarantine(self) -> None:
        self.clock.now += QUARANTINE_SEC + 0.01
        self.supervisor.check()

    def free_slots(self) -> list[int]:
        return sorted(receive(self.wiring.slots.free_queue, 0.1))


@pytest.fixture
def run(tmp_path, monkeypatch):
    return Setup(tmp_path, monkeypatch)


def test_dead_rollout_worker_is_replaced_after_the_quarantine_by_the_next_generation(run):
    wiring, host, sup = run.wiring, run.host, run.supervisor
    old_spec = run.spec("rollout_worker_1")
    mine = [wiring.slots.acquire(1), wiring.slots.acquire(1)]
    other = wiring.slots.acquire(0)
    host.die("rollout_worker_1")
    sup.check()
    assert int(wiring.ledger.generations[1]) == 1  # its requests are dropped from now on
    assert int(wiring.ledger.generations[0]) == 0
    # Quarantine: nothing started, its slots not given back yet (inference may still write).
    run.clock.now += QUARANTINE_SEC - 0.05
    sup.check()
    assert host.started == []
    assert wiring.ledger.slots_of(1) == mine
    assert sup.restarts["rollout_worker"] == 1  # still reported dead: not counted twice

    run.wait_quarantine()
    (spec,) = host.started
    assert (spec.name, spec.kind, spec.index) == ("rollout_worker_1", "rollout_worker", 1)
    assert spec.kwargs["generation"] == 1 and spec.kwargs["worker_index"] == 1
    assert spec.control_queue is wiring.rollout_inboxes[1][1]  # a fresh inbox
    assert spec.kwargs["endpoints"].inbox is wiring.rollout_inboxes[1][1]
    assert spec.control_queue is not old_spec.control_queue
    assert run.spec("rollout_worker_1") is spec
    # Its slots are free again, exactly once each; worker 0's slot is still worker 0's.
    assert wiring.ledger.slots_of(1) == [] and wiring.ledger.slots_of(0) == [other]
    assert run.free_slots() == sorted(set(range(wiring.slots.num_slots)) - {other})
    # A training run: the replacement is told to go on; the old inbox gets nothing.
    assert receive(spec.control_queue, 0.1) == [Resume()]
    assert receive(wiring.rollout_inboxes[1][0], 0.0) == []
    sup.check()
    assert len(host.started) == 1  # started once


def test_a_dead_worker_s_unread_hand_overs_are_checked_with_their_readers(run):
    """A worker killed between the ledger's hand-over and its messages: after the quarantine
    the learner yet to copy the slot is asked about that hand-over (`HandOverCheck`); a slot
    already copied, or handed over by another worker, is not asked about."""
    wiring, ledger = run.wiring, run.wiring.ledger
    lost, copied, others = wiring.slots.acquire(1), wiring.slots.acquire(1), wiring.slots.acquire(0)
    for slot, worker in ((lost, 1), (copied, 1), (others, 0)):
        wiring.buffer.policy_ids[slot] = 0
        wiring.slots.hand_over(slot, readers=[0], worker=worker)
    wiring.slots.copied(copied, 0)
    run.host.die("rollout_worker_1")
    run.supervisor.check()
    run.wait_quarantine()
    checks = receive(wiring.learner_inboxes[0], 0.1)
    assert checks == [HandOverCheck(0, lost, int(ledger.hand_overs[lost]), returns_slot=True)]


def test_a_replacement_outside_training_is_not_resumed(run):
    run.training = False
    run.host.die("rollout_worker_0")
    run.supervisor.check()
    run.wait_quarantine()
    (spec,) = run.host.started
    assert receive(spec.control_queue, 0.1) == []


def test_a_second_death_of_the_replacement_gets_the_generation_after(run):
    for generation in (1, 2):
        run.host.die("rollout_worker_0")
        run.supervisor.check()
        run.wait_quarantine()
        assert run.host.started[-1].kwargs["generation"] == generation
        assert run.host.started[-1].control_queue is run.wiring.rollout_inboxes[0][generation]
    assert int(run.wiring.ledger.generations[0]) == 2


def test_inference_worker_death_restarts_it_and_every_rollout_worker_resends(run):
    wiring, host, sup = run.wiring, run.host, run.supervisor
    wiring.ledger.retire(1)  # worker 1 is in its second generation: its current inbox counts
    spec = run.spec("inference_worker_p0_0")
    host.die("inference_worker_p0_0", code=-11)
    sup.check()
    assert host.started == [spec]  # at once, no quarantine
    assert receive(wiring.rollout_inboxes[0][0], 0.1) == [ResendRequests()]
    assert receive(wiring.rollout_inboxes[1][1], 0.1) == [ResendRequests()]
    assert receive(wiring.rollout_inboxes[1][0], 0.0) == []
    assert wiring.ledger.generations.tolist() == [0, 1]  # nobody retired
    assert sup.restarts == {"rollout_worker": 0, "inference_worker": 1}


def test_learner_death_fails_the_run(run):
    run.host.die("learner_p0", code=1)
    with pytest.raises(ComponentDied, match="learner_p0 died .* run the same command to resume"):
        run.supervisor.check()
    assert run.host.started == []


def test_a_learner_that_exits_while_starting_points_at_its_output_not_at_a_resume(run):
    # A process that dies before it can report (at its import, say) fails the same way again.
    run.not_started = {"learner_p0"}
    run.host.die("learner_p0", code=1)
    with pytest.raises(ComponentDied) as error:
        run.supervisor.check()
    message = str(error.value)
    assert message.startswith("learner_p0 exited while starting (exit code 1)")
    assert "what it printed above says why" in message
    assert "resume" not in message


def test_more_replacements_than_allowed_fail_the_run(run):
    """max_component_restarts=2, counted per kind."""
    for _ in range(2):
        run.host.die("inference_worker_p0_0")
        run.supervisor.check()
    for w in range(2):
        run.host.die(f"rollout_worker_{w}")
        run.supervisor.check()
    run.wait_quarantine()
    assert len(run.host.started) == 4
    run.host.die("rollout_worker_0")
    with pytest.raises(ComponentDied, match="rollout_worker_0 died.*max_component_restarts=2"):
        run.supervisor.check()
    assert len(run.host.started) == 4
    run.host.start(run.spec("rollout_worker_0"))  # only the next death counts below
    run.host.die("inference_worker_p0_0")
    with pytest.raises(ComponentDied, match="inference_worker_p0_0 died.*max_component_restarts=2"):
        run.supervisor.check()


def test_a_hung_rollout_worker_is_killed_then_replaced(run):
    wiring, host, sup = run.wiring, run.host, run.supervisor
    wiring.ledger.heartbeats[0] = time.time() - TIMEOUT_SEC - 5  # silent for too long
    wiring.ledger.heartbeats[1] = time.time() - TIMEOUT_SEC + 5  # slow, but within the limit
    sup.check()
    assert host.killed == ["rollout_worker_0"]
    assert int(wiring.ledger.generations[0]) == 1  # its death seen in the same check
    sup.check()
    assert host.killed == ["rollout_worker_0"]  # killed once, not again while replaced
    run.wait_quarantine()
    assert [s.name for s in host.started] == ["rollout_worker_0"]
    sup.check()  # the replacement has not beaten yet: not hung
    assert host.killed == ["rollout_worker_0"]


def test_a_worker_that_never_beat_is_not_hung(run):
    run.wiring.ledger.heartbeats[0] = 0.0
    run.supervisor.check()
    assert run.host.killed == []


def test_serial_mode_kills_no_hung_worker(run):
    sup = Supervisor(
        cfg=dataclasses.replace(run.cfg, serial_mode=True),
        host=run.host,
        wiring=run.wiring,
        is_training=lambda: True,
    )
    run.wiring.ledger.heartbeats[0] = time.time() - TIMEOUT_SEC - 5
    sup.check()
    assert run.host.killed == []


def test_health_metrics_count_restarts_per_kind(run):
    assert run.supervisor.health_metrics() == {
        "health/rollout_worker_restarts": 0.0,
        "health/inference_worker_restarts": 0.0,
    }
    run.host.die("rollout_worker_1")
    run.host.die("inference_worker_p0_0")
    run.supervisor.check()
    run.wait_quarantine()
    run.host.die("inference_worker_p0_0")
    run.supervisor.check()
    assert run.supervisor.health_metrics() == {
        "health/rollout_worker_restarts": 1.0,
        "health/inference_worker_restarts": 2.0,
    }


def test_stop_all_stops_live_components_only(run):
    wiring, host, sup = run.wiring, run.host, run.supervisor
    host.die("rollout_worker_0")  # replaced: the replacement's inbox is the one to stop
    sup.check()
    run.wait_quarantine()
    receive(wiring.rollout_inboxes[0][1], 0.1)  # its Resume
    host.die("inference_worker_p0_0")  # dead now, not yet seen: never signalled
    sup.stop_all(timeout=3.0)
    assert host.joined == [3.0]
    assert receive(wiring.learner_inboxes[0], 0.1) == [Stop()]
    assert receive(wiring.rollout_inboxes[0][1], 0.1) == [Stop()]
    assert receive(wiring.rollout_inboxes[1][0], 0.1) == [Stop()]
    assert receive(wiring.rollout_inboxes[0][0], 0.0) == []  # the killed generation's
    assert receive(run.spec("inference_worker_p0_0").control_queue, 0.0) == []
