"""Builds the shared buffers, queues and component specs of a run: the system's wiring diagram.

Only this module knows which component talks to which. Components never import each other:
each is handed the queues and buffers it reads and writes.

    rollout worker --InferenceRequested--> each acting policy's request queue --> its inference
        worker(s)
    inference worker --ActionsReady--> rollout worker's inbox
    rollout worker --TrajectoryReady--> each acting trained policy's learner inbox --> batcher
        copies the policy's rows
    last batcher to copy a slot --slot id--> the free-slot queue --> rollout workers
    learner --weights (shared memory, versioned)--> inference workers (and frozen snapshots)
    everyone --reports--> runner's report queue;  runner --commands--> control queues

Policies `0 .. num_policies - 1` are trained (learner + inference workers); the next
`num_frozen_opponents` ids are frozen snapshots (inference workers only). All share one
trajectory buffer, whose rows are the agent seats of each split's envs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.buffers.trajectory_buffer import (
    SharedTrajectoryBuffer,
    TrajectoryLayout,
    slots_needed,
)
from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.hosts import ComponentSpec
from sampleforge.comms.queues import make_queue, send_many
from sampleforge.components.experiment import ExperimentDir
from sampleforge.components.inference_worker import InferenceWorker
from sampleforge.components.learner_worker import LearnerWorker
from sampleforge.components.model_factory import make_actor_critic
from sampleforge.components.policy_mapping import PolicyMapping
from sampleforge.components.rollout_worker import RolloutWorker
from sampleforge.config import Config
from sampleforge.envs.registry import EnvInfo, EnvSpec
from sampleforge.spaces import action_spec, observation_specs


@dataclass
class Wiring:
    """Everything shared between the components of one run."""

    buffer: SharedTrajectoryBuffer
    weights: dict[int, SharedPolicyWeights]  # trained policies and frozen snapshots
    # Weights set from outside (Python API), on their way to each trained policy's learner.
    incoming_weights: dict[int, SharedPolicyWeights]
    report_queue: object
    # rollout_inboxes[worker][generation]: a replacement never inherits the inbox of a killed
    # worker, whose process-shared condition variable may have been left mid-wait (signalling
    # it could then block forever).
    rollout_inboxes: list[list]
    inference_queues: dict[int, object]  # every policy, frozen snapshots included
    learner_inboxes: dict[int, object]  # trained policies
    free_slots: object
    ledger: SamplerLedger
    specs: list[ComponentSpec] = field(default_factory=list)

    def queues(self) -> dict[str, object]:
        """Every queue of the run by name, components' control queues included."""
        queues = {"free_slots": self.free_slots, "reports": self.report_queue}
        queues.update({f"inference_{p}": q for p, q in self.inference_queues.items()})
        queues.update({f"learner_{p}": q for p, q in self.learner_inboxes.items()})
        for w, inboxes in enumerate(self.rollout_inboxes):
            queues.update({f"rollout_{w}_{g}": q for g, q in enumerate(inboxes)})
        known = {id(q) for q in queues.values()}  # learners and rollout workers read their inbox
        queues.update({f"control_{spec.name}": spec.control_queue for spec in self.specs
                       if id(spec.control_queue) not in known})
        return queues

    def rollout_inbox(self, worker: int) -> object:
        """The inbox of the worker's current generation."""
        return self.rollout_inboxes[worker][int(self.ledger.generations[worker])]


# Inboxes carry only (split, step) answers and a few commands.
INBOX_BYTES = 64 << 10


def trajectory_layout(cfg: Config, env: EnvInfo, rnn_state_size: int) -> TrajectoryLayout:
    total_splits = cfg.num_workers * cfg.worker_num_splits
    rows = cfg.envs_per_split * env.num_agents
    return TrajectoryLayout(
        obs_specs=observation_specs(env.observation_space),
        action_spec=action_spec(env.action_space), rnn_state_size=rnn_state_size,
        rollout=cfg.rollout, rows_per_slot=rows,
        num_slots=slots_needed(total_splits, rows, cfg.rollout,
                               cfg.dataset_size * cfg.num_policies))


def wire(cfg: Config, env_spec: EnvSpec, env: EnvInfo, device: torch.device,
         exp: ExperimentDir, resume: bool) -> Wiring:
    """Allocate buffers and queues and describe every component of the run."""
    probe = make_actor_critic(cfg, env.observation_space, env.action_space)
    layout = trajectory_layout(cfg, env, probe.rnn_state_size)
    trained = range(cfg.num_policies)
    acting = range(cfg.num_policies + cfg.num_frozen_opponents)
    wiring = Wiring(
        buffer=SharedTrajectoryBuffer(layout),
        weights={p: SharedPolicyWeights(model_numel(probe), device) for p in acting},
        incoming_weights={p: SharedPolicyWeights(model_numel(probe), device) for p in trained},
        report_queue=make_queue(4 << 20),
        rollout_inboxes=[[make_queue(INBOX_BYTES) for _ in range(cfg.max_component_restarts + 1)]
                         for _ in range(cfg.num_workers)],
        inference_queues={p: DoorbellQueue() for p in acting},
        learner_inboxes={p: make_queue() for p in trained},
        free_slots=make_queue(),
        ledger=SamplerLedger(cfg.num_workers, layout.num_slots, cfg.num_policies))
    send_many(wiring.free_slots, list(range(layout.num_slots)))
    for p in trained:
        wiring.specs.append(_learner_spec(cfg, p, env, device, exp, resume, wiring))
    for p in acting:
        for i in range(cfg.num_inference_workers):
            wiring.specs.append(_inference_spec(cfg, p, i, env, device, wiring))
    for w in range(cfg.num_workers):
        wiring.specs.append(_rollout_spec(cfg, w, env_spec, env, wiring))
    return wiring


def _learner_spec(cfg: Config, p: int, env: EnvInfo, device: torch.device,
                  exp: ExperimentDir, resume: bool, wiring: Wiring) -> ComponentSpec:
    inbox = wiring.learner_inboxes[p]
    return ComponentSpec(f"learner_p{p}", LearnerWorker, dict(
        cfg=cfg, policy_id=p, observation_space=env.observation_space,
        action_space=env.action_space, buffer=wiring.buffer, weights=wiring.weights,
        incoming_weights=wiring.incoming_weights[p], inbox=inbox, free_slots=wiring.free_slots, ledger=wiring.ledger,
        report_queue=wiring.report_queue,
        device=device, checkpoint_dir=str(exp.checkpoint_dir(p)), frameskip=env.frameskip,
        resume=resume), control_queue=inbox, torch_threads=cfg.learner_torch_threads)


def _inference_spec(cfg: Config, p: int, i: int, env: EnvInfo, device: torch.device,
                    wiring: Wiring) -> ComponentSpec:
    control = make_queue(64 << 10)
    factory = functools.partial(make_actor_critic, cfg, env.observation_space, env.action_space)
    return ComponentSpec(f"inference_worker_p{p}_{i}", InferenceWorker, dict(
        policy_id=p, index=i, model_factory=factory, buffer=wiring.buffer,
        weights=wiring.weights[p], ledger=wiring.ledger,
        request_queue=wiring.inference_queues[p],
        control_queue=control, rollout_inboxes=wiring.rollout_inboxes,
        report_queue=wiring.report_queue, device=device, seed=cfg.seed,
        sole_policy=cfg.num_policies + cfg.num_frozen_opponents == 1), control_queue=control)


def _rollout_spec(cfg: Config, w: int, env_spec: EnvSpec, env: EnvInfo,
                  wiring: Wiring) -> ComponentSpec:
    inbox = wiring.rollout_inboxes[w][0]
    return ComponentSpec(f"rollout_worker_{w}", RolloutWorker, dict(
        worker_index=w, env_spec=env_spec, num_envs=cfg.num_envs_per_worker,
        num_splits=cfg.worker_num_splits, buffer=wiring.buffer, inbox=inbox,
        inference_queues=wiring.inference_queues, learner_queues=wiring.learner_inboxes,
        free_slots=wiring.free_slots, report_queue=wiring.report_queue, ledger=wiring.ledger,
        seed=cfg.seed, frameskip=env.frameskip, env_error_policy=cfg.env_error_policy,
        policy_mapping=policy_mapping(cfg)), control_queue=inbox)


def policy_mapping(cfg: Config) -> PolicyMapping:
    return PolicyMapping(cfg.policy_mapping, cfg.num_policies, cfg.num_frozen_opponents,
                         cfg.frozen_opponent_prob)
