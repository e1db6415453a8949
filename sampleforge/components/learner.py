"""Learner: the algorithm half of a policy's training (the process shell is `learner_worker.py`).

Given a time-major dataset of trajectories it runs `num_epochs` passes of minibatch SGD on the
actor-critic loss (APPO, IMPALA or A3C, see `sampleforge.algo.actor_critic_loss`), calling
`on_sgd_step` after every optimizer step so the new weights reach inference at once. It also
measures policy lag (current version minus the version that acted) and drops samples older
than `max_policy_lag`.

Must not: touch queues, processes or files; everything resumable is in `state_dict()`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import gymnasium as gym
import torch
from torch import nn

from sampleforge.algo.actor_critic_loss import LossSettings, actor_critic_loss
from sampleforge.components.batcher import Dataset
from sampleforge.components.model_factory import make_actor_critic
from sampleforge.config import Config


def loss_settings(cfg: Config) -> LossSettings:
    return LossSettings(algorithm=cfg.algorithm, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda,
                        with_vtrace=cfg.with_vtrace, vtrace_rho_bar=cfg.vtrace_rho_bar,
                        vtrace_c_bar=cfg.vtrace_c_bar, ppo_clip_ratio=cfg.ppo_clip_ratio,
                        value_clip=cfg.value_clip, value_loss_coeff=cfg.value_loss_coeff,
                        entropy_coeff=cfg.entropy_coeff,
                        normalize_advantages=cfg.normalize_advantages)


def _lag_stats(lags: torch.Tensor, max_policy_lag: int) -> dict[str, float]:
    return {"policy_lag/min": float(lags.min()), "policy_lag/mean": float(lags.mean()),
            "policy_lag/max": float(lags.max()),
            "learner/dropped_stale_fraction": float((lags > max_policy_lag).float().mean())}


class NonFiniteTrainingError(RuntimeError):
    """Training kept producing non-finite losses or gradients."""


class Learner:
    """Model, optimizer and SGD for one policy; see the module docstring."""

    def __init__(self, cfg: Config, observation_space: gym.Space, action_space: gym.Space,
                 device: torch.device, frameskip: int = 1, policy_id: int = 0):
        self.cfg = cfg
        self.device = device
        self.frameskip = frameskip
        self.policy_id = policy_id
        self.model = make_actor_critic(cfg, observation_space, action_space).to(device)
        # What PBT may change during a run; the config holds only the starting values.
        self.hyperparameters = {"learning_rate": cfg.learning_rate,
                                "entropy_coeff": cfg.entropy_coeff,
                                "adam_beta1": cfg.adam_beta1}
        self.optimizer = self._new_optimizer()
        self.settings = loss_settings(cfg)
        self.policy_version = 0
        self.env_steps = 0
        self.skipped_updates = 0
        self.consecutive_skips = 0

    # --- training -------------------------------------------------------------------------------
    def train(self, data: Dataset, on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """`num_epochs` passes of minibatch SGD over `data`; returns averaged statistics."""
        if self.cfg.normalize_obs:
            self.model.update_normalizer({k: v[:-1].flatten(0, 1) for k, v in data.obs.items()})
        self._set_learning_rate()
        per_minibatch = self.cfg.batch_size // self.cfg.rollout
        totals: dict[str, float] = {}
        steps = 0
        lag_min, lag_max = math.inf, -math.inf
        for _ in range(self.cfg.num_epochs):
            order = torch.randperm(data.num_trajectories, device=self.device)
            for start in range(0, data.num_trajectories - per_minibatch + 1, per_minibatch):
                batch = data.select(order[start:start + per_minibatch])
                # Lag as the paper defines it: SGD steps between acting and this update.
                lags = (self.policy_version - batch.policy_versions[:-1]).float()
                valids = batch.valids[:-1] * (lags <= self.cfg.max_policy_lag).float()
                stats = self._sgd_step(batch, valids)
                ours = batch.policy_ids[:-1] == self.policy_id
                stats.update(_lag_stats(lags[ours] if ours.any() else lags,
                                        self.cfg.max_policy_lag))
                lag_min = min(lag_min, stats["policy_lag/min"])
                lag_max = max(lag_max, stats["policy_lag/max"])
                on_sgd_step()
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                steps += 1
        own_steps = int((data.policy_ids[:-1] == self.policy_id).sum())
        self.env_steps += own_steps * self.frameskip
        out = {k: v / max(steps, 1) for k, v in totals.items()}
        out.update({"policy_lag/min": lag_min, "policy_lag/max": lag_max,
                    "learner/lr": self.optimizer.param_groups[0]["lr"],
                    "health/skipped_updates": float(self.skipped_updates)})
        return out

    def _sgd_step(self, batch: Dataset, valids: torch.Tensor) -> dict[str, float]:
        rewards = batch.rewards[:-1] * self.cfg.reward_scale
        if self.cfg.reward_clip is not None:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        dones = batch.dones[:-1]
        # Row T's action was never taken; any valid action keeps the log-prob finite.
        actions = batch.actions.clone()
        actions[-1] = actions[-2]
        episode_starts = torch.zeros_like(batch.dones)
        episode_starts[1:] = batch.dones[:-1]
        out = self.model.evaluate(batch.obs, batch.rnn_states[0], episode_starts, actions)
        behaviour_values = torch.cat([batch.values[:-1], out.values[-1:].detach()])
        loss = actor_critic_loss(
            settings=self.settings, log_probs=out.log_probs[:-1], entropy=out.entropy[:-1],
            values=out.values, behaviour_log_probs=batch.log_probs[:-1],
            behaviour_values=behaviour_values, rewards=rewards, dones=dones, valids=valids)
        self.optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        grad_norm = self._clip_gradients()
        if not (math.isfinite(loss.total.item()) and math.isfinite(grad_norm)):
            self._skip_update()
            return {"health/non_finite_updates": 1.0}
        self.consecutive_skips = 0
        self.optimizer.step()
        self.policy_version += 1
        stats = {"losses/total": loss.total.item(), "losses/policy": loss.policy_loss.item(),
                 "losses/value": loss.value_loss.item(), "losses/entropy": loss.entropy.item(),
                 "learner/grad_norm": grad_norm}
        stats.update({f"learner/{k}": float(v) for k, v in loss.metrics.items()})
        return stats

    def _skip_update(self) -> None:
        """Leave parameters and optimizer state untouched; fail after too many in a row."""
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_updates += 1
        self.consecutive_skips += 1
        if self.consecutive_skips >= self.cfg.max_consecutive_skipped_updates:
            raise NonFiniteTrainingError(
                f"{self.consecutive_skips} SGD steps in a row had a non-finite loss or gradient "
                "(each was skipped); check rewards and observations, or lower learning_rate")

    def _clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        return float(nn.utils.clip_grad_norm_(params, max_norm))

    def _set_learning_rate(self) -> None:
        lr = self.hyperparameters["learning_rate"]
        if self.cfg.lr_schedule == "linear":
            lr *= max(0.0, 1.0 - self.env_steps / self.cfg.train_for_env_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # --- population-based training --------------------------------------------------------------
    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """Use new learning rate, entropy coefficient or Adam beta1 from the next SGD step."""
        unknown = set(values) - set(self.hyperparameters)
        if unknown:
            raise KeyError(f"unknown learner hyperparameters {sorted(unknown)}; "
                           f"allowed: {sorted(self.hyperparameters)}")
        self.hyperparameters.update({k: float(v) for k, v in values.items()})
        self.settings = dataclasses.replace(self.settings,
                                            entropy_coeff=self.hyperparameters["entropy_coeff"])
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
        return torch.optim.Adam(self.model.parameters(), lr=h["learning_rate"],
                                betas=(h["adam_beta1"], self.cfg.adam_beta2),
                                eps=self.cfg.adam_eps)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume exactly (plain tensors and numbers only)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "policy_version": self.policy_version, "env_steps": self.env_steps,
                "skipped_updates": self.skipped_updates,
                "hyperparameters": dict(self.hyperparameters)}

    def assert_finite(self) -> None:
        """Raise if any parameter or optimizer statistic is non-finite (never checkpoint one)."""
        bad = [name for name, t in self.model.state_dict().items()
               if t.is_floating_point() and not torch.isfinite(t).all()]
        for group in self.optimizer.state.values():
            bad += [k for k, t in group.items()
                    if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()]
        if bad:
            raise NonFiniteTrainingError(f"non-finite values in {', '.join(bad[:5])}; "
                                         "refusing to write a checkpoint")

    def load_weights(self, model_state: dict) -> None:
        """Replace the model's weights (Python API, PBT). The policy version moves on, so
        inference workers pick the new weights up at once and samples acted by the old ones
        count as lagging."""
        self._load_model(model_state)
        self.policy_version += 1

    def _load_model(self, model_state: dict) -> None:
        try:
            self.model.load_state_dict(model_state)
        except RuntimeError as e:
            raise ValueError(f"checkpoint does not fit this model ({_first_line(e)}); was it "
                             "written for another env or model config?") from None

    def load_state_dict(self, state: dict) -> None:
        self._load_model(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.policy_version = int(state["policy_version"])
        self.env_steps = int(state["env_steps"])
        self.skipped_updates = int(state.get("skipped_updates", 0))
        # "hyperparameters" are not restored: a resumed run uses the config's values (which may
        # have been changed on purpose), and with PBT the runner re-sends the population's.


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines[:2])
