"""The wiring alone: which buffers and queues each component is handed.

`wire` only allocates shared memory and queues and describes the components (nothing is started
here), so the test reads the diagram it builds: every component's spec, kind and index, and that
each endpoint is the very object its neighbour writes to or reads from.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from sampleforge.buffers.trajectory_buffer import slots_needed
from sampleforge.checkpoint.experiment_dir import prepare_experiment
from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.queues import receive
from sampleforge.components.eval_worker import EvaluationWorker
from sampleforge.components.inference_worker import InferenceWorker
from sampleforge.components.learner_worker import LearnerWorker
from sampleforge.components.rollout_worker import RolloutWorker
from sampleforge.components.wiring import policy_mapping, wire
from sampleforge.config import make_config
from sampleforge.envs.registry import env_info, resolve_env
from sampleforge.evaluation.schedule import evaluation_dir
from sampleforge.models.factory import make_actor_critic

SMALL = dict(
    num_workers=2,
    num_envs_per_worker=4,
    worker_num_splits=2,
    rollout=8,
    batch_size=32,
    num_inference_workers=2,
    max_component_restarts=2,
    device="cpu",
    seed=0,
)


def _wire(tmp_path, **overrides):
    cfg = make_config(train_dir=str(tmp_path), **{**SMALL, **overrides})
    exp, resume = prepare_experiment(cfg)
    info = env_info(cfg.env)
    return cfg, exp, info, wire(cfg, resolve_env(cfg.env), info, torch.device("cpu"), exp, resume)


@pytest.fixture
def cartpole(tmp_path):
    return _wire(tmp_path, env="CartPole-v1")


@pytest.fixture
def population(tmp_path):
    """Two trained policies and one frozen opponent on the two-seat duel."""
    return _wire(
        tmp_path, env="duel", num_policies=2, num_frozen_opponents=1, policy_mapping="random"
    )


def _specs(wiring):
    return {spec.name: spec for spec in wiring.specs}


def test_every_component_has_a_spec_of_its_kind_and_index(cartpole):
    _, _, _, wiring = cartpole
    specs = _specs(wiring)
    assert len(specs) == len(wiring.specs)  # names are unique
    assert {name: (s.kind, s.index, s.build) for name, s in specs.items()} == {
        "learner_p0": ("learner", 0, LearnerWorker),
        "inference_worker_p0_0": ("inference_worker", 0, InferenceWorker),
        "inference_worker_p0_1": ("inference_worker", 1, InferenceWorker),
        "rollout_worker_0": ("rollout_worker", 0, RolloutWorker),
        "rollout_worker_1": ("rollout_worker", 1, RolloutWorker),
    }


@pytest.mark.parametrize(
    "spin, threads, spinning",
    [(False, 2, set()), (True, 2, {"learner_p0"}), (True, 1, set())],
)
def test_only_a_learner_with_threads_to_wait_for_spins(tmp_path, spin, threads, spinning):
    """`learner_threads_spin` reaches the learner's spec when it has more than one thread,
    and no other component's: envs and inference keep threads that sleep at once."""
    _, _, _, wiring = _wire(
        tmp_path, env="CartPole-v1", learner_threads_spin=spin, learner_torch_threads=threads
    )
    assert {spec.name for spec in wiring.specs if spec.threads_spin} == spinning


def test_every_spec_builds_with_its_kwargs(population, tmp_path):
    """Each spec's kwargs fit its component's constructor (a spawned process would find out
    only when it starts)."""
    _, _, _, wiring = population
    _, _, _, with_eval = _wire(tmp_path / "eval", env="CartPole-v1", eval_every_env_steps=1000)
    for spec in [*wiring.specs, *with_eval.specs]:
        inspect.signature(spec.build).bind(**spec.kwargs)


def test_the_buffer_fits_the_envs_and_the_model(cartpole, population):
    for cfg, _, info, wiring in (cartpole, population):
        layout = wiring.buffer.layout
        model = make_actor_critic(cfg, info.observation_space, info.action_space)
        assert layout.rows_per_slot == cfg.envs_per_split * info.num_agents
        assert layout.rnn_state_size == model.rnn_state_size and layout.rollout == cfg.rollout
        assert layout.num_slots == slots_needed(
            cfg.num_workers * cfg.worker_num_splits,
            layout.rows_per_slot,
            cfg.rollout,
            cfg.dataset_size * cfg.num_policies,
        )
        assert wiring.ledger.num_slots == layout.num_slots
        assert wiring.ledger.slot_readers.shape == (layout.num_slots, cfg.num_policies)
        assert wiring.ledger.generations.tolist() == [0] * cfg.num_workers


def test_all_slots_start_free_and_unowned(cartpole):
    _, _, _, wiring = cartpole
    n = wiring.buffer.layout.num_slots
    assert wiring.slots.ledger is wiring.ledger
    assert sorted(receive(wiring.slots.free_queue, 0.1)) == list(range(n))
    assert wiring.ledger.slots_being_filled() == 0


def test_learners_read_their_policys_inbox_and_publish_its_weights(population):
    cfg, exp, _, wiring = population
    specs = _specs(wiring)
    assert sorted(wiring.learner_inboxes) == sorted(wiring.incoming_weights) == [0, 1]
    assert len({id(q) for q in wiring.learner_inboxes.values()}) == 2
    for p in (0, 1):
        spec = specs[f"learner_p{p}"]
        endpoints = spec.kwargs["endpoints"]
        assert spec.kwargs["policy_id"] == p
        assert endpoints.inbox is wiring.learner_inboxes[p] is spec.control_queue
        assert endpoints.incoming_weights is wiring.incoming_weights[p]
        # every policy's weights: its own to publish, the frozen opponents' to fill
        assert endpoints.weights is wiring.weights
        assert endpoints.buffer is wiring.buffer and endpoints.slots is wiring.slots
        assert endpoints.report_queue is wiring.report_queue
        assert spec.kwargs["checkpoint_dir"] == str(exp.checkpoint_dir(p))
    assert "learner_p2" not in specs  # the frozen opponent is never trained


def test_inference_workers_serve_their_policys_queue_with_its_weights(population):
    cfg, _, _, wiring = population
    specs = _specs(wiring)
    acting = [0, 1, 2]
    assert sorted(wiring.weights) == sorted(wiring.inference_queues) == acting
    assert len({id(w) for w in wiring.weights.values()}) == 3
    assert all(isinstance(q, DoorbellQueue) for q in wiring.inference_queues.values())
    controls = set()
    for p in acting:
        for i in range(cfg.num_inference_workers):
            spec = specs[f"inference_worker_p{p}_{i}"]
            endpoints = spec.kwargs["endpoints"]
            assert (spec.kwargs["policy_id"], spec.kwargs["index"]) == (p, i)
            assert endpoints.weights is wiring.weights[p]
            assert endpoints.request_queue is wiring.inference_queues[p]  # shared by its workers
            assert endpoints.rollout_inboxes is wiring.rollout_inboxes
            assert endpoints.ledger is wiring.ledger and endpoints.buffer is wiring.buffer
            assert endpoints.report_queue is wiring.report_queue
            assert spec.control_queue is endpoints.control_queue
            assert spec.kwargs["sole_policy"] is False  # rows of other policies in each slot
            controls.add(id(spec.control_queue))
    assert len(controls) == 3 * cfg.num_inference_workers  # one control queue each


def test_the_only_policy_of_a_run_acts_for_every_row(cartpole):
    _, _, _, wiring = cartpole
    for spec in wiring.specs:
        if spec.kind == "inference_worker":
            assert spec.kwargs["sole_policy"] is True
            assert spec.kwargs["endpoints"].weights is wiring.weights[0]


def test_rollout_workers_talk_to_every_policy_and_read_their_generations_inbox(population):
    cfg, _, info, wiring = population
    specs = _specs(wiring)
    assert len(wiring.rollout_inboxes) == cfg.num_workers
    all_inboxes = [id(q) for inboxes in wiring.rollout_inboxes for q in inboxes]
    assert len(set(all_inboxes)) == cfg.num_workers * (cfg.max_component_restarts + 1)
    for w in range(cfg.num_workers):
        spec = specs[f"rollout_worker_{w}"]
        endpoints = spec.kwargs["endpoints"]
        assert spec.kwargs["worker_index"] == w and spec.kwargs["generation"] == 0
        assert endpoints.inbox is wiring.rollout_inboxes[w][0] is spec.control_queue
        assert wiring.rollout_inbox(w) is endpoints.inbox
        assert endpoints.inference_queues is wiring.inference_queues  # frozen opponent's too
        assert endpoints.learner_queues is wiring.learner_inboxes
        assert endpoints.slots is wiring.slots and endpoints.ledger is wiring.ledger
        assert endpoints.buffer is wiring.buffer
        assert spec.kwargs["policy_mapping"] == policy_mapping(cfg)
        assert spec.kwargs["policy_mapping"].num_frozen == 1
        assert spec.kwargs["env_spec"] == resolve_env("duel")
        assert spec.kwargs["num_envs"] == cfg.num_envs_per_worker
        assert spec.kwargs["num_splits"] == cfg.worker_num_splits


def test_a_replacement_gets_its_generations_own_inbox(cartpole):
    cfg, _, _, wiring = cartpole
    first = _specs(wiring)["rollout_worker_1"]
    for generation in range(cfg.max_component_restarts + 1):
        spec = wiring.rollout_worker_spec(1, generation)
        assert (spec.name, spec.kind, spec.index) == ("rollout_worker_1", "rollout_worker", 1)
        assert spec.kwargs["generation"] == generation
        assert spec.control_queue is wiring.rollout_inboxes[1][generation]
        assert spec.kwargs["endpoints"].inbox is spec.control_queue
        # everything else is shared with the worker it replaces
        assert (
            spec.kwargs["endpoints"].inference_queues is first.kwargs["endpoints"].inference_queues
        )
        assert spec.kwargs["endpoints"].slots is wiring.slots
    wiring.ledger.retire(1)
    assert wiring.rollout_inbox(1) is wiring.rollout_inboxes[1][1]
    assert wiring.rollout_inbox(0) is wiring.rollout_inboxes[0][0]


def test_evaluation_workers_only_with_eval_every_env_steps(cartpole, population, tmp_path):
    for _, _, _, wiring in (cartpole, population):
        assert not [s for s in wiring.specs if s.kind == "evaluation_worker"]
        assert wiring.evaluation_inboxes == {}
    cfg, exp, _, wiring = _wire(
        tmp_path / "eval",
        env="duel",
        num_policies=2,
        num_frozen_opponents=1,
        eval_every_env_steps=1000,
    )
    evaluation = [s for s in wiring.specs if s.kind == "evaluation_worker"]
    assert [(s.name, s.index) for s in evaluation] == [
        ("evaluation_worker_p0", 0),
        ("evaluation_worker_p1", 1),
    ]
    for spec in evaluation:
        p = spec.index
        assert spec.build is EvaluationWorker and spec.kwargs["policy_id"] == p
        endpoints = spec.kwargs["endpoints"]
        assert endpoints.inbox is wiring.evaluation_inboxes[p] is spec.control_queue
        assert endpoints.weights is wiring.weights[p]
        assert endpoints.report_queue is wiring.report_queue
        assert spec.kwargs["best_dir"] == str(evaluation_dir(exp, p))
    assert sorted(wiring.evaluation_inboxes) == [0, 1]


def test_queues_names_every_queue_once(population, tmp_path):
    for _, _, _, wiring in (
        population,
        _wire(tmp_path / "eval", env="CartPole-v1", eval_every_env_steps=1000),
    ):
        queues = wiring.queues()
        ids = [id(q) for q in queues.values()]
        assert len(ids) == len(set(ids)), "a queue under two names"
        expected = [
            wiring.slots.free_queue,
            wiring.report_queue,
            *wiring.inference_queues.values(),
            *wiring.learner_inboxes.values(),
            *(q for inboxes in wiring.rollout_inboxes for q in inboxes),
            *(spec.control_queue for spec in wiring.specs),
            *wiring.evaluation_inboxes.values(),
        ]
        assert set(ids) == {id(q) for q in expected}
        assert queues["free_slots"] is wiring.slots.free_queue
        assert queues["reports"] is wiring.report_queue
        for p, q in wiring.inference_queues.items():
            assert queues[f"inference_{p}"] is q
        for p, q in wiring.learner_inboxes.items():
            assert queues[f"learner_{p}"] is q
        for w, inboxes in enumerate(wiring.rollout_inboxes):
            for g, q in enumerate(inboxes):
                assert queues[f"rollout_{w}_{g}"] is q


def test_releasing_the_shared_tensors_empties_every_policys_weights(population):
    # The runner calls it at close: on CUDA it produced these tensors, and torch warns at its
    # exit about any it shared that is still allocated.
    _, _, _, wiring = population
    shared = [*wiring.weights.values(), *wiring.incoming_weights.values()]
    assert len(shared) == 3 + 2 and all(w.flat.numel() > 0 for w in shared)
    wiring.release_shared_tensors()
    assert all(w.flat.numel() == w.exact.numel() == 0 for w in shared)
