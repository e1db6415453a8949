"""Which learner family trains an algorithm, and how its parts are built.

Responsible for: mapping `--algorithm` (through its family, `config/algorithms.py`) to the
three parts the learner worker runs (`learners/protocols.py`): a learner that trains, a stager
for arrived trajectories and a sampling gate. This is the one place that knows which classes
make up a family; the learner worker, the runner and the wiring only ask it.

Adding an algorithm: its loss in `algo/`, its settings beside it, a family module here (or an
existing family's), its name and family in `config/algorithms.py`, and an entry below.

Must not: touch processes or queues (the learner worker does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import torch

from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.config import Config
from sampleforge.config.algorithms import algorithm_family
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.batcher import Batcher
from sampleforge.learners.protocols import GatesSampling, StagesData, Trains
from sampleforge.learners.sampling_gate import SamplingGate


@dataclass(frozen=True)
class LearnerParts:
    """What one policy's learner worker runs."""

    learner: Trains
    stager: StagesData
    gate: GatesSampling


@dataclass(frozen=True)
class LearnerSite:
    """Where a learner runs: what the wiring hands its worker."""

    observation_space: gym.Space
    action_space: gym.Space
    device: torch.device
    frameskip: int
    policy_id: int
    buffer: SharedTrajectoryBuffer
    slots: SlotPool


def _make_actor_critic(cfg: Config, site: LearnerSite) -> LearnerParts:
    """On-policy: datasets of whole trajectories, sampling gated by the policy lag."""
    learner = ActorCriticLearner(
        cfg,
        site.observation_space,
        site.action_space,
        site.device,
        site.frameskip,
        policy_id=site.policy_id,
    )
    stager = Batcher(
        site.buffer,
        site.slots,
        cfg.dataset_size // cfg.rollout,
        site.device,
        policy_id=site.policy_id,
    )
    lead = cfg.sampling_lead_sgd_steps
    if lead is None and cfg.serial_mode:
        # Serial components take turns, so there is no overlap to measure, and a lead
        # measured on the clock would make a seeded run differ from itself.
        lead = 0
    gate = SamplingGate(
        site.slots.ledger,
        site.policy_id,
        stager.dataset_trajectories,
        site.buffer.layout.rows_per_slot,
        learner.sgd_steps_per_dataset,
        lead,
    )
    return LearnerParts(learner=learner, stager=stager, gate=gate)


# family name (config/algorithms.py) -> how its parts are built
FAMILIES: dict[str, Callable[[Config, LearnerSite], LearnerParts]] = {
    "actor_critic": _make_actor_critic,
}


def make_learner_parts(cfg: Config, site: LearnerSite) -> LearnerParts:
    """The learner, stager and gate of `cfg.algorithm`'s family, for the policy at `site`."""
    return FAMILIES[algorithm_family(cfg.algorithm)](cfg, site)
