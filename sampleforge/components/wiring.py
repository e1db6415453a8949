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
import logging
from dataclasses import dataclass, field
from typing import Callable

import torch

from sampleforge.buffers.sampler_ledger import SamplerLedger
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import (
    SharedTrajectoryBuffer,
    TrajectoryLayout,
    slots_needed,
)
from sampleforge.checkpoint.experiment_dir import ExperimentDir
from sampleforge.comms.component_process import releasables_in
from sampleforge.comms.cpu_affinity import rollout_worker_core, usable_cores
from sampleforge.comms.doorbell_queue import DoorbellQueue
from sampleforge.comms.hosts import ComponentSpec
from sampleforge.comms.messages import LoadWeights, Pause, Resume
from sampleforge.comms.queue_locks import release_if_held_by
from sampleforge.comms.queues import make_queue, send_many
from sampleforge.components.eval_worker import EvaluationEndpoints, EvaluationWorker
from sampleforge.components.inference_worker import InferenceEndpoints, InferenceWorker
from sampleforge.components.learner_worker import LearnerEndpoints, LearnerWorker
from sampleforge.components.memory_estimate import check_memory
from sampleforge.components.rollout_worker import RolloutEndpoints, RolloutWorker
from sampleforge.config import Config
from sampleforge.distributed.torchrun_rank import TorchrunRank
from sampleforge.envs.policy_mapping import PolicyMapping
from sampleforge.envs.registry import EnvInfo, EnvSpec
from sampleforge.evaluation.schedule import evaluation_dir
from sampleforge.models.factory import make_policy_model
from sampleforge.spaces import action_spec, observation_specs

log = logging.getLogger(__name__)


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
    slots: SlotPool  # the free-slot queue and the slot tables of the ledger
    ledger: SamplerLedger
    specs: list[ComponentSpec] = field(default_factory=list)
    evaluation_inboxes: dict[int, object] = field(default_factory=dict)  # eval_every_env_steps
    # (worker, generation) -> the spec of that generation of a rollout worker: how the
    # supervisor builds a replacement.
    rollout_worker_spec: Callable[[int, int], ComponentSpec] | None = None

    def queues(self) -> dict[str, object]:
        """Every queue of the run by name, components' control queues included."""
        queues = {"free_slots": self.slots.free_queue, "reports": self.report_queue}
        queues.update({f"inference_{p}": q for p, q in self.inference_queues.items()})
        queues.update({f"learner_{p}": q for p, q in self.learner_inboxes.items()})
        for w, inboxes in enumerate(self.rollout_inboxes):
            queues.update({f"rollout_{w}_{g}": q for g, q in enumerate(inboxes)})
        known = {id(q) for q in queues.values()}  # learners and rollout workers read their inbox
        queues.update(
            {
                f"control_{spec.name}": spec.control_queue
                for spec in self.specs
                if id(spec.control_queue) not in known
            }
        )
        return queues

    def shared_tensors(self) -> dict[str, torch.Tensor]:
        """Every shared tensor of the run by name: the trajectory buffer, the sampler ledger
        and each policy's published weights (what a serial-mode snapshot captures)."""
        tensors = {f"buffer.{k}": t for k, t in self.buffer.fields().items()}
        ledger = self.ledger
        tensors.update(
            {
                "ledger.slot_owners": ledger.slot_owners,
                "ledger.slot_readers": ledger.slot_readers,
                "ledger.generations": ledger.generations,
            }
        )
        for p, weights in self.weights.items():
            tensors.update(
                {
                    f"weights{p}.flat": weights.flat,
                    f"weights{p}.exact": weights.exact,
                    f"weights{p}.header": weights.header,
                }
            )
        return tensors

    def send_to_learner(self, policy_id: int, messages: list) -> None:
        """Queue commands for a trained policy's learner."""
        send_many(self.learner_inboxes[policy_id], messages)

    def send_to_rollout_worker(self, worker: int, messages: list) -> None:
        """Queue commands for the current generation of a rollout worker."""
        send_many(self.rollout_inbox(worker), messages)

    def release_locks_held_by(self, name: str, pid: int) -> None:
        """Component `name` (process `pid`) ended: a queue lock it held would block everyone
        else on that queue."""
        for queue_name, q in self.queues().items():
            if release_if_held_by(q, pid):
                log.warning(
                    "%s (pid %d) died holding the lock of queue %s; released it",
                    name,
                    pid,
                    queue_name,
                )

    def release_shared_tensors(self) -> None:
        """Let go of the policy weights this process made and shared: the run is over.

        On CUDA the runner is their producer, and torch warns at its exit ("Producer process
        has been terminated before all shared CUDA tensors released") while any CUDA tensor
        it shared is still allocated, even once every reader has let go. Call it after the
        components have stopped: a reader still mapping one keeps it in torch's limbo.
        """
        for shared in releasables_in(self):
            shared.release_shared()

    def send_weights_to_learner(self, policy_id: int, model: torch.nn.Module) -> None:
        """Hand `model`'s weights to `policy_id`'s learner (Python API, between `train` calls):
        bulk weights through shared memory, the learner's inbox carries only the version."""
        incoming = self.incoming_weights[policy_id]
        version = incoming.version + 1
        incoming.publish(model, version)
        send_many(self.learner_inboxes[policy_id], [LoadWeights(version)])

    def send_to_samplers_and_learners(self, msg: Pause | Resume) -> None:
        """Pause or Resume every rollout worker and learner. Learners pause too, so that the
        final checkpoint of a `train` call is the last training state: trajectories that
        arrive after the pause wait for the next call."""
        for w in range(len(self.rollout_inboxes)):
            send_many(self.rollout_inbox(w), [msg])
        for inbox in self.learner_inboxes.values():
            send_many(inbox, [msg])

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
        action_spec=action_spec(env.action_space),
        rnn_state_size=rnn_state_size,
        rollout=cfg.rollout,
        rows_per_slot=rows,
        num_slots=slots_needed(
            total_splits, rows, cfg.rollout, cfg.max_dataset_size * cfg.num_policies
        ),
        frame_stacked_keys=env.frame_stacked_keys,
    )


def check_run_fits(cfg: Config, env: EnvInfo, device: torch.device) -> None:
    """ConfigError if the buffers `wire` would allocate cannot fit in this machine's memory;
    called before the experiment folder is touched, so a refused run leaves nothing behind."""
    probe = make_policy_model(cfg, env.observation_space, env.action_space)
    check_memory(cfg, trajectory_layout(cfg, env, probe.rnn_state_size), model_numel(probe), device)


def wire(
    cfg: Config,
    env_spec: EnvSpec,
    env: EnvInfo,
    device: torch.device,
    exp: ExperimentDir,
    resume: bool,
    rank: TorchrunRank | None = None,
) -> Wiring:
    """Allocate buffers and queues and describe every component of the run."""
    probe = make_policy_model(cfg, env.observation_space, env.action_space)
    layout = trajectory_layout(cfg, env, probe.rnn_state_size)
    trained = range(cfg.num_policies)
    acting = range(cfg.num_policies + cfg.num_frozen_opponents)
    ledger = SamplerLedger(cfg.num_workers, layout.num_slots, cfg.num_policies)
    wiring = Wiring(
        buffer=SharedTrajectoryBuffer(layout),
        weights={p: SharedPolicyWeights(model_numel(probe), device) for p in acting},
        incoming_weights={p: SharedPolicyWeights(model_numel(probe), device) for p in trained},
        report_queue=make_queue(4 << 20),
        rollout_inboxes=[
            [make_queue(INBOX_BYTES) for _ in range(cfg.max_component_restarts + 1)]
            for _ in range(cfg.num_workers)
        ],
        inference_queues={p: DoorbellQueue() for p in acting},
        learner_inboxes={p: make_queue() for p in trained},
        slots=SlotPool.create(ledger),
        ledger=ledger,
    )
    for p in trained:
        wiring.specs.append(_learner_spec(cfg, p, env, device, exp, resume, wiring, rank))
    for p in acting:
        for i in range(cfg.num_inference_workers):
            wiring.specs.append(_inference_spec(cfg, p, i, env, device, wiring))
    wiring.rollout_worker_spec = functools.partial(
        _rollout_spec, cfg, env_spec, env, wiring, rollout_worker_cores(cfg, rank)
    )
    for w in range(cfg.num_workers):
        wiring.specs.append(wiring.rollout_worker_spec(w, 0))
    if cfg.eval_every_env_steps is not None:
        for p in trained:
            wiring.specs.append(_evaluation_spec(cfg, p, env_spec, env, exp, wiring))
    return wiring


def _learner_spec(
    cfg: Config,
    p: int,
    env: EnvInfo,
    device: torch.device,
    exp: ExperimentDir,
    resume: bool,
    wiring: Wiring,
    rank: TorchrunRank | None,
) -> ComponentSpec:
    endpoints = LearnerEndpoints(
        buffer=wiring.buffer,
        weights=wiring.weights,
        incoming_weights=wiring.incoming_weights[p],
        inbox=wiring.learner_inboxes[p],
        slots=wiring.slots,
        report_queue=wiring.report_queue,
    )
    return ComponentSpec(
        f"learner_p{p}",
        LearnerWorker,
        dict(
            cfg=cfg,
            policy_id=p,
            endpoints=endpoints,
            observation_space=env.observation_space,
            action_space=env.action_space,
            device=device,
            checkpoint_dir=str(exp.checkpoint_dir(p)),
            frameskip=env.frameskip,
            resume=resume,
            rank=rank,
        ),
        control_queue=endpoints.inbox,
        torch_threads=cfg.learner_torch_threads,
        # One thread has no parallel regions to wait for; spinning would only cost it a spawn.
        threads_spin=cfg.learner_threads_spin and cfg.learner_torch_threads > 1,
        kind="learner",
        index=p,
    )


def _inference_spec(
    cfg: Config, p: int, i: int, env: EnvInfo, device: torch.device, wiring: Wiring
) -> ComponentSpec:
    endpoints = InferenceEndpoints(
        buffer=wiring.buffer,
        weights=wiring.weights[p],
        ledger=wiring.ledger,
        request_queue=wiring.inference_queues[p],
        control_queue=make_queue(64 << 10),
        rollout_inboxes=wiring.rollout_inboxes,
        report_queue=wiring.report_queue,
    )
    factory = functools.partial(make_policy_model, cfg, env.observation_space, env.action_space)
    return ComponentSpec(
        f"inference_worker_p{p}_{i}",
        InferenceWorker,
        dict(
            policy_id=p,
            index=i,
            endpoints=endpoints,
            model_factory=factory,
            device=device,
            seed=cfg.seed,
            sole_policy=cfg.num_policies + cfg.num_frozen_opponents == 1,
            splits_per_worker=cfg.worker_num_splits,
        ),
        control_queue=endpoints.control_queue,
        kind="inference_worker",
        index=i,
    )


def rollout_worker_cores(cfg: Config, rank: TorchrunRank | None = None) -> list[int] | None:
    """The core of each rollout worker (`worker_cpu_affinity`), or None: unpinned.

    Chosen once, here in the runner, from the cores the runner may use; every generation of a
    worker is built from this list, so a replacement gets its predecessor's core. Serial mode
    runs the workers in the runner's own process, which must not be pinned. The ranks of a
    data-parallel run on one node start at different cores.
    """
    if not cfg.worker_cpu_affinity or cfg.serial_mode:
        return None
    cores = usable_cores()
    first = 0 if rank is None else rank.local_rank * cfg.num_workers
    return [rollout_worker_core(w, cores, first) for w in range(cfg.num_workers)]


def _rollout_spec(
    cfg: Config,
    env_spec: EnvSpec,
    env: EnvInfo,
    wiring: Wiring,
    cores: list[int] | None,
    w: int,
    generation: int,
) -> ComponentSpec:
    """Rollout worker `w` of `generation`: a replacement gets a fresh inbox, never the one of
    the worker it replaces, and the core of the one it replaces (`cores[w]`)."""
    endpoints = RolloutEndpoints(
        buffer=wiring.buffer,
        inbox=wiring.rollout_inboxes[w][generation],
        inference_queues=wiring.inference_queues,
        learner_queues=wiring.learner_inboxes,
        slots=wiring.slots,
        ledger=wiring.ledger,
        report_queue=wiring.report_queue,
    )
    return ComponentSpec(
        f"rollout_worker_{w}",
        RolloutWorker,
        dict(
            worker_index=w,
            endpoints=endpoints,
            env_spec=env_spec,
            num_envs=cfg.num_envs_per_worker,
            num_splits=cfg.worker_num_splits,
            seed=cfg.seed,
            frameskip=env.frameskip,
            env_error_policy=cfg.env_error_policy,
            max_consecutive_env_faults=cfg.max_consecutive_env_faults,
            generation=generation,
            policy_mapping=policy_mapping(cfg),
            cpu_core=None if cores is None else cores[w],
        ),
        control_queue=endpoints.inbox,
        kind="rollout_worker",
        index=w,
    )


def _evaluation_spec(
    cfg: Config, p: int, env_spec: EnvSpec, env: EnvInfo, exp: ExperimentDir, wiring: Wiring
) -> ComponentSpec:
    wiring.evaluation_inboxes[p] = inbox = make_queue(64 << 10)
    best_dir = str(evaluation_dir(exp, p)) if cfg.eval_save_best else None
    endpoints = EvaluationEndpoints(
        weights=wiring.weights[p], inbox=inbox, report_queue=wiring.report_queue
    )
    return ComponentSpec(
        f"evaluation_worker_p{p}",
        EvaluationWorker,
        dict(
            cfg=cfg,
            policy_id=p,
            endpoints=endpoints,
            env_spec=env_spec,
            observation_space=env.observation_space,
            action_space=env.action_space,
            best_dir=best_dir,
        ),
        control_queue=inbox,
        kind="evaluation_worker",
        index=p,
    )


def policy_mapping(cfg: Config) -> PolicyMapping:
    return PolicyMapping(
        cfg.policy_mapping, cfg.num_policies, cfg.num_frozen_opponents, cfg.frozen_opponent_prob
    )
