"""ActorCriticLearner: the algorithm half of a policy's training (the process shell is `learner_worker.py`).

Given a time-major dataset of trajectories it runs `num_epochs` passes of minibatch SGD on the
actor-critic loss (APPO, IMPALA or A3C, see `sampleforge.algo.actor_critic_loss`). Minibatches
are whole trajectories where advantages need the current network (V-trace, A3C) or a recurrent
state; for a feed-forward APPO with GAE they are single samples shuffled across the dataset,
as in the PPO recipe (`shuffle_samples`). After every optimizer step it calls `on_sgd_step`,
so the new weights reach inference at once. It also measures policy lag (current version minus
the version that acted) and drops samples older than `max_policy_lag`.

Must not: touch queues, processes or files; everything resumable is in `state_dict()`.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Callable, Iterator

import gymnasium as gym
import torch
from torch import nn

from sampleforge.algo.actor_critic_loss import (
    ActorCriticSettings,
    LossOutput,
    Rollout,
    actor_critic_loss,
    advantages_and_targets,
    loss_from_advantages,
    uses_vtrace,
)
from sampleforge.buffers.step_validity import trainable
from sampleforge.buffers.trajectory_buffer import TrajectoryLayout
from sampleforge.config import Config
from sampleforge.learners.batcher import Dataset, Samples, minibatch_size, staging_capacity
from sampleforge.learners.optimization import (
    DataParallel,
    NonFiniteTrainingError,
    average_and_clip,
    encoder_compute_dtype,
    load_model,
    load_optimizer_state,
    raise_unless_finite,
    schedule_progress,
    set_scheduled_learning_rate,
    step_unless_non_finite,
)
from sampleforge.learners.step_undo import StepUndo
from sampleforge.models.factory import make_actor_critic

# What PBT, and the Python API between `train` calls, may change during a run
# (`set_hyperparameters`; the API accepts exactly these names, through learners/registry.py).
HYPERPARAMETERS = ("learning_rate", "entropy_coeff", "adam_beta1")


def _lag_stats(lags: torch.Tensor, max_policy_lag: int) -> dict[str, float]:
    return {
        "policy_lag/min": float(lags.min()),
        "policy_lag/mean": float(lags.mean()),
        "policy_lag/max": float(lags.max()),
        "learner/dropped_stale_fraction": float((lags > max_policy_lag).float().mean()),
    }


def trains_on_samples(cfg: Config) -> bool:
    """Minibatches of single samples drawn from the whole dataset (`shuffle_samples`),
    possible where advantages depend only on what the acting policy recorded (APPO with GAE)
    and no recurrent state ties samples to their trajectory."""
    return (
        cfg.shuffle_samples
        and cfg.rnn == "none"
        and cfg.algorithm == "appo"
        and not uses_vtrace(cfg, cfg.algorithm)
    )


def actor_critic_staging_bytes(cfg: Config, layout: TrajectoryLayout) -> int:
    """What one learner allocates for its data: the batcher's two staging areas, and the
    copies made of a dataset and of a minibatch, at the largest dataset size."""
    per_step = layout.step_bytes()
    steps = layout.rollout + 1
    trajectories = cfg.max_dataset_size // cfg.rollout  # datasets may grow to it
    minibatch = cfg.max_batch_size or cfg.batch_size
    staging = 2 * staging_capacity(trajectories, layout.rows_per_slot) * steps * per_step
    if not trains_on_samples(cfg):
        return staging + (minibatch // cfg.rollout) * steps * per_step
    # A sample (`batcher.Samples`) holds a step's observation, action, version and policy, and
    # five float32s as a step does (log-prob, value, valid, advantage and target in place of
    # reward, done, valid, log-prob and value), but no recurrent state.
    per_sample = per_step - 4 * layout.rnn_state_size
    return staging + (cfg.max_dataset_size + minibatch) * per_sample


class ActorCriticLearner:
    """Model, optimizer and SGD for one policy; see the module docstring."""

    def __init__(
        self,
        cfg: Config,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: torch.device,
        frameskip: int = 1,
        policy_id: int = 0,
    ):
        self.cfg = cfg
        self.device = device
        self.frameskip = frameskip
        self.policy_id = policy_id
        self.model = make_actor_critic(cfg, observation_space, action_space).to(device)
        self.model.encoder_compute_dtype = encoder_compute_dtype(cfg)
        # HYPERPARAMETERS' current values; the config holds only the starting ones.
        self.hyperparameters = {name: float(getattr(cfg, name)) for name in HYPERPARAMETERS}
        self.optimizer = self._new_optimizer()
        # The config is the loss's settings (Config inherits ActorCriticSettings); PBT swaps in
        # a copy with its entropy coefficient (set_hyperparameters).
        self.settings: ActorCriticSettings = cfg
        self.policy_version = 0
        self.env_steps = 0
        self.skipped_updates = 0
        self.consecutive_skips = 0
        self._step_undo = StepUndo()
        self.data_parallel: DataParallel | None = None  # the other ranks (distributed runs)

    # --- training -------------------------------------------------------------------------------
    def train(self, data: Dataset, on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """`num_epochs` passes of minibatch SGD over `data` (`early_num_epochs` over a run's first
        `early_env_steps`); returns averaged statistics."""
        if self.model.normalized_keys:
            self.model.update_normalizer({k: v[:-1].flatten(0, 1) for k, v in data.obs.items()})
        self._set_learning_rate()
        epochs = self.num_epochs
        steps = (
            self._sample_steps(data, epochs)
            if self.trains_on_samples
            else self._trajectory_steps(data, epochs)
        )
        totals: dict[str, float] = {}
        count = 0
        lag_min, lag_max = math.inf, -math.inf
        for stats in steps:
            lag_min = min(lag_min, stats["policy_lag/min"])
            lag_max = max(lag_max, stats["policy_lag/max"])
            on_sgd_step()
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v
            count += 1
        own_steps = int((data.policy_ids[:-1] == self.policy_id).sum())
        self.env_steps += own_steps * self.frameskip
        out = {k: v / max(count, 1) for k, v in totals.items()}
        out.update(
            {
                "policy_lag/min": lag_min,
                "policy_lag/max": lag_max,
                "learner/lr": self.optimizer.param_groups[0]["lr"],
                "learner/num_epochs": float(epochs),
                "health/skipped_updates": float(self.skipped_updates),
            }
        )
        return out

    @property
    def num_epochs(self) -> int:
        """Passes over the next dataset: `early_num_epochs` until the policy has trained on
        `early_env_steps`, then `num_epochs`."""
        early = self.cfg.early_num_epochs
        if early is not None and self.env_steps < self.cfg.early_env_steps:
            return early
        return self.cfg.num_epochs

    @property
    def sgd_steps_per_dataset(self) -> int:
        return self.num_epochs * self.cfg.num_batches_per_epoch

    @property
    def trains_on_samples(self) -> bool:
        """Minibatches of single samples drawn from the whole dataset (see `trains_on_samples`)."""
        return trains_on_samples(self.cfg)

    def _trajectory_steps(self, data: Dataset, epochs: int) -> Iterator[dict[str, float]]:
        """One SGD step per minibatch of whole trajectories; advantages per minibatch."""
        per_minibatch = minibatch_size(data.num_trajectories, self.cfg.num_batches_per_epoch)
        for _ in range(epochs):
            order = torch.randperm(data.num_trajectories, device=self.device)
            for start in range(0, data.num_trajectories - per_minibatch + 1, per_minibatch):
                batch = data.select(order[start : start + per_minibatch])
                valids, lag_stats = self._lag_mask(
                    batch.policy_versions[:-1], batch.valids[:-1], batch.policy_ids[:-1]
                )
                stats = self._sgd_step(partial(self._trajectory_loss, batch, valids))
                stats.update(lag_stats)
                yield stats

    def _sample_steps(self, data: Dataset, epochs: int) -> Iterator[dict[str, float]]:
        """One SGD step per minibatch of single samples (`batch_size` of them, or more in a
        grown dataset), shuffled across the whole dataset each epoch; GAE advantages and
        targets computed once, before the first."""
        samples = self._prepare_samples(data)
        count = samples.advantages.shape[0]
        size = minibatch_size(count, self.cfg.num_batches_per_epoch)
        for _ in range(epochs):
            order = torch.randperm(count, device=self.device)
            for start in range(0, count - size + 1, size):
                batch = samples.take(order[start : start + size])
                valids, lag_stats = self._lag_mask(
                    batch.policy_versions, batch.valids, batch.policy_ids
                )
                stats = self._sgd_step(partial(self._sample_loss, batch, valids))
                stats.update(lag_stats)
                yield stats

    def _lag_mask(
        self, versions: torch.Tensor, valids: torch.Tensor, policy_ids: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """`valids` without samples older than max_policy_lag, and the lag statistics (of this
        policy's own samples, when it has any)."""
        # Lag as the paper defines it: SGD steps between acting and this update.
        lags = (self.policy_version - versions).float()
        ours = policy_ids == self.policy_id
        stats = _lag_stats(lags[ours] if ours.any() else lags, self.cfg.max_policy_lag)
        return trainable(valids, policy_ids, self.policy_id, lags, self.cfg.max_policy_lag), stats

    def _rewards_and_dones(self, data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
        rewards = data.rewards[:-1] * self.cfg.reward_scale
        if self.cfg.reward_clip is not None:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards, data.dones[:-1]

    def _trajectory_loss(self, batch: Dataset, valids: torch.Tensor) -> LossOutput:
        rewards, dones = self._rewards_and_dones(batch)
        # Row T's action was never taken; any valid action keeps the log-prob finite.
        actions = batch.actions.clone()
        actions[-1] = actions[-2]
        episode_starts = torch.zeros_like(batch.dones)
        episode_starts[1:] = batch.dones[:-1]
        out = self.model.evaluate(batch.obs, batch.rnn_states[0], episode_starts, actions)
        # Behaviour values are in reward units (ActorCritic.act de-normalises them); so is the
        # bootstrap row taken from the current network.
        behaviour_values = torch.cat([batch.values[:-1], out.values[-1:].detach()])
        rollout = Rollout(
            log_probs=out.log_probs[:-1],
            entropy=out.entropy[:-1],
            uniform_kl=None if out.uniform_kl is None else out.uniform_kl[:-1],
            values=out.normalized_values,
            behaviour_log_probs=batch.log_probs[:-1],
            behaviour_values=behaviour_values,
            rewards=rewards,
            dones=dones,
            valids=valids,
        )
        return actor_critic_loss(
            self.cfg.algorithm, self.settings, rollout, self.model.returns_normalizer
        )

    def _prepare_samples(self, data: Dataset) -> "Samples":
        """GAE over every trajectory of `data` on the behaviour values (bootstrapped with the
        current network's value of the last observation), then every step as one sample."""
        rewards, dones = self._rewards_and_dones(data)
        with torch.no_grad():
            last = {k: v[-1:] for k, v in data.obs.items()}
            bootstrap = self.model.evaluate(
                last, data.rnn_states[-1], torch.zeros_like(data.dones[-1:]), data.actions[-2:-1]
            ).values
        behaviour_values = torch.cat([data.values[:-1], bootstrap])
        advantages, targets = advantages_and_targets(
            algorithm=self.cfg.algorithm,
            settings=self.settings,
            behaviour_values=behaviour_values,
            rewards=rewards,
            dones=dones,
            valids=data.valids[:-1],
        )

        def steps(x: torch.Tensor) -> torch.Tensor:  # [T + 1, N, ...] -> [T * N, ...]
            return x[:-1].flatten(0, 1)

        return Samples(
            obs={k: steps(v) for k, v in data.obs.items()},
            actions=steps(data.actions),
            log_probs=steps(data.log_probs),
            values=steps(data.values),
            advantages=advantages.flatten(0, 1),
            targets=targets.flatten(0, 1),
            valids=steps(data.valids),
            policy_versions=steps(data.policy_versions),
            policy_ids=steps(data.policy_ids),
        )

    def _sample_loss(self, batch: "Samples", valids: torch.Tensor) -> LossOutput:
        count = valids.shape[0]
        # Each sample is a one-step "trajectory": [1, count].
        out = self.model.evaluate(
            {k: v.unsqueeze(0) for k, v in batch.obs.items()},
            torch.zeros(count, 0, device=valids.device),
            torch.zeros(1, count, device=valids.device),
            batch.actions.unsqueeze(0),
        )
        return loss_from_advantages(
            algorithm=self.cfg.algorithm,
            settings=self.settings,
            log_probs=out.log_probs,
            entropy=out.entropy,
            values=out.normalized_values,
            behaviour_log_probs=batch.log_probs.unsqueeze(0),
            behaviour_values=batch.values.unsqueeze(0),
            advantages=batch.advantages.unsqueeze(0),
            targets=batch.targets.unsqueeze(0),
            valids=valids.unsqueeze(0),
            value_normalizer=self.model.returns_normalizer,
            uniform_kl=out.uniform_kl,
        )

    def _sgd_step(self, compute_loss: Callable[[], LossOutput]) -> dict[str, float]:
        # normalize_returns: the loss de-normalises the network's values with the current
        # statistics, merges this minibatch's targets into them and regresses the normalised
        # head output on normalised targets. The update is per minibatch (as SF2): the V-trace
        # targets depend on the current network and exist only here, and it keeps the
        # statistics in step with exactly the targets the value loss uses.
        returns_rms = self.model.returns_normalizer
        saved_rms = (
            None
            if returns_rms is None
            else {k: v.clone() for k, v in returns_rms.state_dict().items()}
        )
        loss = compute_loss()
        self.optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        grad_norm, finite = average_and_clip(
            self.model, loss.total, self.cfg.max_grad_norm, self.data_parallel
        )
        if not step_unless_non_finite(self._step_undo, self.model, [self.optimizer], finite):
            if returns_rms is not None and saved_rms is not None:
                returns_rms.load_state_dict(saved_rms)  # a skipped update leaves them as they were
            self._skip_update()
            return {"health/non_finite_updates": 1.0}
        self.consecutive_skips = 0
        self.policy_version += 1
        stats = {
            "losses/total": loss.total.item(),
            "losses/policy": loss.policy_loss.item(),
            "losses/value": loss.value_loss.item(),
            "losses/entropy": loss.entropy.item(),
            "learner/grad_norm": grad_norm,
        }
        stats.update({f"learner/{k}": float(v) for k, v in loss.metrics.items()})
        if returns_rms is not None:
            stats["learner/returns_mean"] = float(returns_rms.mean)
            stats["learner/returns_std"] = float(returns_rms.var.sqrt())
        return stats

    def _skip_update(self) -> None:
        """Leave parameters and optimizer state as they were; fail after too many in a row."""
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_updates += 1
        self.consecutive_skips += 1
        if self.consecutive_skips >= self.cfg.max_consecutive_skipped_updates:
            raise NonFiniteTrainingError(
                f"{self.consecutive_skips} SGD steps in a row had a non-finite loss, gradient "
                "or result (each was skipped); check rewards and observations, or lower "
                "learning_rate"
            )

    def _set_learning_rate(self) -> None:
        set_scheduled_learning_rate(
            self.optimizer,
            self.hyperparameters["learning_rate"],
            self.cfg.lr_schedule,
            schedule_progress(self.cfg, self.env_steps),
        )

    # --- population-based training --------------------------------------------------------------
    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """Use new learning rate, entropy coefficient or Adam beta1 from the next SGD step."""
        unknown = set(values) - set(self.hyperparameters)
        if unknown:
            raise KeyError(
                f"unknown learner hyperparameters {sorted(unknown)}; "
                f"allowed: {sorted(self.hyperparameters)}"
            )
        self.hyperparameters.update({k: float(v) for k, v in values.items()})
        self.settings = dataclasses.replace(
            self.settings, entropy_coeff=self.hyperparameters["entropy_coeff"]
        )
        for group in self.optimizer.param_groups:
            group["betas"] = (self.hyperparameters["adam_beta1"], self.cfg.adam_beta2)
        self._set_learning_rate()

    def copy_policy(self, model: nn.Module) -> None:
        """Continue from another policy's weights (PBT). Its Adam moments belong to its own
        trajectory through parameter space, so the optimizer starts afresh."""
        self.model.load_state_dict(model.state_dict())
        self.optimizer = self._new_optimizer()
        self.policy_version += 1

    def _new_optimizer(self) -> torch.optim.Optimizer:
        h = self.hyperparameters
        return torch.optim.Adam(
            self.model.parameters(),
            lr=h["learning_rate"],
            betas=(h["adam_beta1"], self.cfg.adam_beta2),
            eps=self.cfg.adam_eps,
        )

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume exactly (plain tensors and numbers only)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "policy_version": self.policy_version,
            "env_steps": self.env_steps,
            "skipped_updates": self.skipped_updates,
            "hyperparameters": dict(self.hyperparameters),
        }

    def assert_finite(self) -> None:
        """Raise if any parameter or optimizer statistic is non-finite (never checkpoint one)."""
        raise_unless_finite(self.model, self.optimizer)

    def weights_replaced(self) -> None:
        """The model's weights were replaced (Python API, PBT). The policy version moves on, so
        inference workers pick the new weights up at once and samples acted by the old ones
        count as lagging."""
        self.policy_version += 1

    def load_state_dict(self, state: dict) -> None:
        load_model(self.model, state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.policy_version = int(state["policy_version"])
        self.env_steps = int(state["env_steps"])
        self.skipped_updates = int(state.get("skipped_updates", 0))
        # "hyperparameters" are not restored: a resumed run uses the config's values (which may
        # have been changed on purpose), and with PBT the runner re-sends the population's.
