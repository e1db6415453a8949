"""Evaluation worker: evaluates frozen copies of a policy while training goes on.

When the runner sends `EvaluationRequested`, it copies the policy's current weights out of
shared memory (the same `SharedPolicyWeights` the inference workers read) into its own CPU
model, then plays `eval_episodes` episodes with them on its own envs (`EpisodeRunner`), a
slice of steps per `poll`, so it stays responsive to `Stop` and can run inline in serial
mode. It reports `EvaluationFinished`; with `eval_save_best` it keeps the weights of the best
evaluation so far in ``<experiment>/eval/p<policy>/best.pt`` (a `CheckpointStore`, so the
file is atomic and checksummed; state ``{"model": ...}`` like a learner checkpoint).

Must not: write the learner's checkpoint folder, block the runner, or decide when to evaluate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym
import torch

from sampleforge.buffers.shared_weights import SharedPolicyWeights
from sampleforge.checkpoint.store import CheckpointStore
from sampleforge.comms.eval_messages import EvaluationFinished, EvaluationRequested
from sampleforge.comms.messages import Pause, Resume, Stop
from sampleforge.comms.queues import receive, send_many
from sampleforge.config import Config
from sampleforge.envs.registry import EnvSpec
from sampleforge.evaluation.episodes import EpisodeRunner
from sampleforge.evaluation.local_policy import LocalPolicy

SLICE_SEC = 0.05  # env stepping per poll: short enough to notice Stop at once
MAX_EVAL_ENVS = 8
WEIGHTS_TIMEOUT_SEC = 60.0


@dataclass(frozen=True)
class EvaluationEndpoints:
    """What an evaluation worker reads and writes; built by the wiring."""

    weights: SharedPolicyWeights  # its policy's, published by the learner
    inbox: Any  # evaluation requests and commands
    report_queue: Any


class EvaluationWorker:
    """Evaluates one policy on request; see the module docstring."""

    def __init__(
        self,
        *,
        cfg: Config,
        policy_id: int,
        endpoints: EvaluationEndpoints,
        env_spec: EnvSpec,
        observation_space: gym.Space,
        action_space: gym.Space,
        best_dir: Optional[str],
    ) -> None:
        self.name = f"evaluation_worker_p{policy_id}"
        self.cfg = cfg
        self.policy_id = policy_id
        self.env_spec = env_spec
        self.weights = endpoints.weights
        self.inbox = endpoints.inbox
        self.report_queue = endpoints.report_queue
        self.running = True
        self.policy = LocalPolicy.build(cfg, observation_space, action_space)
        self.store = None if best_dir is None else CheckpointStore(Path(best_dir), keep_last=1)
        self._episodes: Optional[EpisodeRunner] = None
        self._request: Optional[EvaluationRequested] = None
        self._queued: Optional[EvaluationRequested] = None
        self._version = -1
        self._started = 0.0

    def poll(self, timeout: float) -> None:
        """Handle commands; play a slice of the current evaluation's steps."""
        for msg in receive(self.inbox, 0.0 if self._episodes else timeout):
            self._handle(msg)
        if self._episodes is None and self._queued is not None and self.running:
            self._begin(self._queued)
            self._queued = None
        if self._episodes is not None and self._episodes.run(max_seconds=SLICE_SEC):
            self._finish()

    def close(self) -> None:
        if self._episodes is not None:
            self._episodes.close()
            self._episodes = None

    def snapshot_state(self) -> dict:
        """Nothing for an exact resume: evaluation never changes training (an evaluation in
        flight at a serial-mode snapshot is not repeated; the best weights are in best.pt)."""
        return {}

    def restore_state(self, state: dict) -> None:
        pass

    def _handle(self, msg) -> None:
        if isinstance(msg, EvaluationRequested):
            self._queued = msg  # only the newest request matters
        elif isinstance(msg, Stop):
            self.running = False
        elif not isinstance(msg, (Pause, Resume)):
            raise TypeError(f"{self.name}: unexpected message {msg!r}")

    def _begin(self, request: EvaluationRequested) -> None:
        self._version = self._freeze_weights()
        if self.cfg.seed is not None:
            torch.manual_seed(self.cfg.seed)  # the same action samples every evaluation
        episodes = range(self.cfg.eval_episodes)
        self._episodes = EpisodeRunner(
            self.policy,
            self.env_spec,
            episodes,
            seed=self.cfg.seed,
            deterministic=self.cfg.eval_deterministic,
            num_envs=min(MAX_EVAL_ENVS, self.cfg.eval_episodes),
        )
        self._request = request
        self._started = time.monotonic()

    def _freeze_weights(self) -> int:
        """Copy the newest published weights into the local model; returns their version."""
        deadline = time.monotonic() + WEIGHTS_TIMEOUT_SEC
        while True:
            version = self.weights.pull(self.policy.model, -1)
            if version >= 0:
                return version
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no weights published within {WEIGHTS_TIMEOUT_SEC:.0f} s"
                )
            time.sleep(0.01)

    def _finish(self) -> None:
        assert self._episodes is not None and self._request is not None  # an evaluation ran
        result = self._episodes.result()
        self._episodes.close()
        self._episodes = None
        best_path = self._save_if_best(result.mean_return)
        send_many(
            self.report_queue,
            [
                EvaluationFinished(
                    policy_id=self.policy_id,
                    env_steps=self._request.env_steps,
                    policy_version=self._version,
                    returns=list(result.returns),
                    lengths=list(result.lengths),
                    seconds=time.monotonic() - self._started,
                    best_path=best_path,
                )
            ],
        )

    def _save_if_best(self, mean_return: float) -> Optional[str]:
        if self.store is None or self._request is None:
            return None
        best_before = self.store.best_mean_return
        state = {
            "model": self.policy.model.state_dict(),
            "policy_version": self._version,
            "env_steps": self._request.env_steps,
            "eval_mean_return": float(mean_return),
        }
        self.store.save(
            state,
            env_steps=self._request.env_steps,
            policy_version=self._version,
            mean_return=mean_return,
        )
        if self.store.best_mean_return != best_before:
            return str(self.store.best_path)
        return None
