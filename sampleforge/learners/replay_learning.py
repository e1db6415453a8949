"""What every learner from a replay shares: its counters, and how one update is published.

Responsible for: ``ReplayLearning``, the base of the value-based and continuous-control
learners: the stager it takes batches from, the device, the env steps counted by the
transitions inserted, the updates and policy version, the skipped-update guard, and
``_published`` (after each update: the trained env steps into the policy's weights, the version
into the stager for the policy lag, then the worker's publish callback) and PER's annealed
importance-weight exponent.

Must not: hold a model, an optimizer or a loss (each family's learner does).
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from sampleforge.config import Config
from sampleforge.learners.optimization import DataParallel, SkippedUpdates
from sampleforge.learners.replay_stager import ReplayStager


class KnowsTrainedSteps(Protocol):
    """A policy whose weights carry the env steps trained on (exploration is scheduled by it)."""

    def set_trained_env_steps(self, env_steps: int) -> None: ...


class ReplayLearning:
    """The counters of a learner that trains on replay batches (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        stager: ReplayStager,
        device: torch.device,
        frameskip: int,
        policy_id: int,
    ) -> None:
        self.cfg = cfg
        self.stager = stager
        self._device = device
        self.frameskip = frameskip
        self.policy_id = policy_id
        self.policy_version = 0
        self.updates = 0
        self.skips = SkippedUpdates(cfg.max_consecutive_skipped_updates)
        self.data_parallel: DataParallel | None = None  # the other ranks (distributed runs)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def env_steps(self) -> int:
        return self.stager.inserted_steps * self.frameskip

    @env_steps.setter
    def env_steps(self, value: int) -> None:
        # A data-parallel run counts every rank's steps (learner_worker.py's rounds).
        self.stager.inserted_steps = value // self.frameskip

    @property
    def sgd_steps_per_dataset(self) -> int:
        return self.stager.batches_per_take

    @property
    def skipped_updates(self) -> int:
        return self.skips.total

    def _published(self, model: KnowsTrainedSteps, on_sgd_step: Callable[[], None]) -> None:
        """After an update: `model` learns the env steps trained on, the stager the version,
        and the worker publishes."""
        model.set_trained_env_steps(self.env_steps)
        self.stager.current_version = self.policy_version
        on_sgd_step()

    def _anneal_priority_beta(self) -> None:
        """PER's importance-weight exponent for the batches to come: `priority_beta` annealed
        linearly to 1 over the run (the sampler ignores it without prioritized replay)."""
        start = self.cfg.priority_beta
        fraction = min(1.0, self.env_steps / max(1, self.cfg.train_for_env_steps))
        self.stager.sampler.set_beta(start + fraction * (1.0 - start))

    def _restore_counters(self, state: dict) -> None:
        """The counters of `state` (a `state_dict` of the subclass)."""
        self.policy_version = int(state["policy_version"])
        self.stager.inserted_steps = int(state["env_steps"]) // self.frameskip
        self.updates = int(state["updates"])
        self.skips.total = int(state.get("skipped_updates", 0))
        self.stager.current_version = self.policy_version

    def _counters(self) -> dict:
        return {
            "policy_version": self.policy_version,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "skipped_updates": self.skipped_updates,
        }
