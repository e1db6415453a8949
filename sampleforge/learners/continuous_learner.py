"""ContinuousLearner: the update rule of the continuous-control algorithms (DDPG, TD3, SAC,
CrossQ), composed by `ContinuousSettings`.

Given replay batches (`learners/replay_stager.py`, the value-based family's replay and rate
limiter), each one critic update and, every `policy_delay` of them, an actor update:

    a'     = target actor(s') smoothed (DDPG, TD3)   or   a' ~ pi(.|s') (SAC, CrossQ)
    y      = R + d * (min_k Q'_k(s', a') [- alpha log pi(a'|s')])
    critic = sum_k mean_b w_b (Q_k(s_b, a_b) - y_b)^2
    actor  = -mean Q_1(s, mu(s))   or   mean(alpha log pi(a|s) - min_k Q_k(s, a)),  a ~ pi(.|s)
    alpha  : -mean(log alpha * (log pi(a|s) + target entropy))          (SAC's temperature)

Q' are the target critics, Polyak-averaged (`target_tau`) every `target_update_period`
updates; without them (CrossQ) the critics evaluate (s, a) and (s', a') in one batch-normalised
pass and the bootstrap is that pass's second half, as a constant. The critics are one fused
ensemble (`models/critic_ensemble.py`) owned here; the policy (`models/continuous_policy.py`)
holds the actor and is what is published. Actions from the replay are in the env's bounds and
are mapped to [-1, 1], the actor's and the critics' units.

With `learner_bootstrap_thread` (`learners/bootstrap_thread.py`) the bootstrap (a' and the
target critics at s') is computed on a second thread beside the critics' forward pass, and the
copies a non-finite critic or actor step is undone from beside their backward passes. The same
arithmetic in the same order of random draws: only the thread that makes them differs.

Must not: touch queues, processes or files; everything resumable is in `state_dict()`.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from sampleforge.algo.continuous_control import (
    critic_loss,
    critic_targets,
    default_target_entropy,
    deterministic_actor_loss,
    sac_actor_loss,
    smoothed_target_actions,
    soft_bootstrap,
    squashed_gaussian_sample,
    temperature_loss,
)
from sampleforge.buffers.replay import ReplayBatch
from sampleforge.config import Config
from sampleforge.learners.bootstrap_thread import BootstrapThread, undo_copy_taken
from sampleforge.learners.optimization import (
    all_ranks,
    average_and_clip,
    load_model,
    load_optimizer_state,
    make_adam,
    polyak_update,
    raise_unless_finite,
    schedule_progress,
    set_scheduled_learning_rate,
    step_unless_non_finite,
)
from sampleforge.learners.replay_learning import ReplayLearning
from sampleforge.learners.replay_stager import ReplayStager
from sampleforge.learners.step_undo import StepUndo
from sampleforge.models.continuous_policy import ContinuousPolicy
from sampleforge.models.critic_ensemble import CriticEnsemble

# What `set_hyperparameters` changes (the Python API accepts exactly these names, through
# learners/registry.py).
HYPERPARAMETERS = ("learning_rate", "actor_learning_rate")


class Temperature(nn.Module):
    """SAC's entropy temperature, learned as log alpha (a module, so that it is checkpointed
    and its optimizer step can be undone like any other)."""

    def __init__(self, alpha: float, learned: bool) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)), requires_grad=learned)

    @property
    def alpha(self) -> Tensor:
        return self.log_alpha.detach().exp()


def make_critics(cfg: Config, policy: ContinuousPolicy) -> CriticEnsemble:
    """The critic ensemble `cfg` describes, over [observation vector, unit action]."""
    in_features = policy.actor.trunk_in_features + policy.action_dim
    return CriticEnsemble(
        in_features,
        cfg.num_critics,
        tuple(cfg.critic_hidden_sizes or cfg.mlp_hidden_sizes),
        activation=cfg.activation,
        batch_renorm=cfg.batch_renorm,
        renorm_warmup_steps=cfg.batch_renorm_warmup,
        renorm_momentum=cfg.batch_renorm_momentum,
    )


class ContinuousLearner(ReplayLearning):
    """A continuous-control policy's training state and update rule (see the module doc)."""

    def __init__(
        self,
        cfg: Config,
        model: ContinuousPolicy,
        stager: ReplayStager,
        device: torch.device,
        frameskip: int,
        policy_id: int = 0,
    ):
        super().__init__(cfg, stager, device, frameskip, policy_id)
        self._model = model.to(device)
        self._model.train()
        self.critics = make_critics(cfg, model).to(device)
        self.target_critics = self._frozen_copy(self.critics) if cfg.target_critics else None
        deterministic = model.actor.log_std is None
        self.target_actor = self._frozen_copy(model.actor) if deterministic else None
        gaussian = not deterministic
        self.temperature = Temperature(cfg.entropy_temperature, cfg.learn_temperature and gaussian)
        self.temperature.to(device)
        self.target_entropy = (
            cfg.target_entropy
            if cfg.target_entropy is not None
            else default_target_entropy(model.action_dim)
        )
        self.learning_rate = cfg.learning_rate
        self.actor_learning_rate = cfg.actor_learning_rate
        self._new_optimizers()
        self._critic_undo, self._actor_undo = StepUndo(), StepUndo()
        self._bootstrap = BootstrapThread(cfg.learner_bootstrap_thread)
        # The actor's step and the temperature's are undone together.
        self._actor_side = nn.ModuleList([self._model.actor, self.temperature])

    @staticmethod
    def _frozen_copy(module: nn.Module) -> nn.Module:
        # A target only evaluates: with batch renormalisation, by the running statistics that
        # Polyak averaging brings over, never by the batch's.
        target = copy.deepcopy(module)
        target.requires_grad_(False)
        return target.eval()

    # --- Trains ---------------------------------------------------------------------------------
    @property
    def model(self) -> ContinuousPolicy:
        return self._model

    def train(self, data: list[ReplayBatch], on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """One critic update per batch (and the actor's every `policy_delay`); returns
        averaged statistics."""
        self._set_learning_rates()
        self._anneal_priority_beta()
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        for batch in data:
            for k, v in self._update(batch).items():
                totals[k] = totals.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
            self._published(self._model, on_sgd_step)
        # Losses average over the updates that made them (the actor's: every policy_delay);
        # health flags are the fraction of all the updates of this take.
        out = {
            k: v / (len(data) if k.startswith("health/") else counts[k]) for k, v in totals.items()
        }
        out.update(
            {
                **self.stager.report(self.cfg.replay_size),
                "learner/lr": self.critic_optimizer.param_groups[0]["lr"],
                "learner/alpha": float(self.temperature.alpha),
                "health/skipped_updates": float(self.skipped_updates),
            }
        )
        return out

    # --- one update -----------------------------------------------------------------------------
    def _update(self, replay_batch: ReplayBatch) -> dict[str, float]:
        b = self._to_device(replay_batch)
        finite = bool(torch.isfinite(torch.cat([b.returns, b.discounts, b.weights])).all())
        if not all_ranks(finite, self.data_parallel):
            self.skips.record(False)
            return {"health/non_finite_updates": 1.0}
        policy = self._model
        policy.update_normalizer(b.obs)
        x, x_next = policy.observation_vector(b.obs), policy.observation_vector(b.next_obs)
        actions = policy.to_unit(b.actions)
        stats = self._critic_update(b, x, actions, x_next)
        if stats is None:
            return {"health/non_finite_updates": 1.0}
        self.updates += 1
        self.policy_version += 1
        if self.updates % self.cfg.policy_delay == 0:
            stats.update(self._actor_update(x))
            if self.target_actor is not None:
                polyak_update(self.target_actor, self._model.actor, self.cfg.target_tau)
        if self.target_critics is not None and self.updates % self.cfg.target_update_period == 0:
            polyak_update(self.target_critics, self.critics, self.cfg.target_tau)
        return stats

    def _critic_update(
        self, b: _Batch, x: Tensor, actions: Tensor, x_next: Tensor
    ) -> dict[str, float] | None:
        """The critics' step on targets from the next states; None when it was skipped."""
        inputs = torch.cat([x, actions], dim=1)
        if self.target_critics is None:
            # CrossQ: one pass over both halves, so batch normalisation sees them together.
            with torch.no_grad():
                next_actions, next_log_prob = self._next_actions(x_next)
            both = self.critics(torch.cat([inputs, torch.cat([x_next, next_actions], dim=1)]))
            q, next_q = both[:, : x.shape[0]], both[:, x.shape[0] :].detach()
        else:
            # a' and Q'(s', a') need nothing of the critics' pass: beside it on the thread.
            target_pass = self._bootstrap.submit(self._target_values, x_next)
            q = self.critics(inputs)
            next_q, next_log_prob = target_pass.result()
        bootstrap = soft_bootstrap(next_q, next_log_prob, self.temperature.alpha)
        targets = critic_targets(b.returns, b.discounts, bootstrap)
        loss, priorities = critic_loss(q, targets, b.weights)
        saving = self._save_beside(self._critic_undo, self.critics, [self.critic_optimizer])
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm, finite = average_and_clip(
            self.critics, loss, self.cfg.max_grad_norm, self.data_parallel
        )
        taken = step_unless_non_finite(
            self._critic_undo,
            self.critics,
            [self.critic_optimizer],
            finite,
            undo_copy_taken(saving),
        )
        self.skips.record(taken)
        if not taken:
            return None
        if self.cfg.prioritized_replay:
            self.stager.sampler.update_priorities(b.indices, priorities.double().cpu().numpy())
        return {
            "losses/critic": loss.item(),
            "learner/q_taken": float(q.detach().mean()),
            "learner/grad_norm": grad_norm,
        }

    def _target_values(self, x_next: Tensor) -> tuple[Tensor, Tensor | None]:
        """Q'_k(s', a') for a' from `_next_actions`, and log pi(a'|s') (no gradient)."""
        assert self.target_critics is not None
        next_actions, next_log_prob = self._next_actions(x_next)
        return self.target_critics(torch.cat([x_next, next_actions], dim=1)), next_log_prob

    def _save_beside(
        self, undo: StepUndo, model: nn.Module, optimizers: list[torch.optim.Optimizer]
    ) -> Future[None] | None:
        """With the bootstrap thread, the undo copy of the coming step, taken there while the
        backward pass runs (nothing changes `model`'s parameters before the step)."""
        if not self._bootstrap.concurrent:
            return None
        return self._bootstrap.submit(undo.save, model, optimizers)

    def _next_actions(self, x_next: Tensor) -> tuple[Tensor, Tensor | None]:
        """a' for the bootstrap, in [-1, 1], and log pi(a'|s') for a stochastic actor."""
        if self.target_actor is None:
            # The actor proposes a' as it acts: with batch renormalisation by its running
            # statistics, which only its own step's pass on s moves (as CrossQ's reference).
            with _in_mode(self._model.actor, training=False):
                out = self._model.actor(x_next)
            assert out.log_std is not None
            return squashed_gaussian_sample(out.mean, out.log_std)
        mean = self.target_actor(x_next).mean
        cfg = self.cfg
        return smoothed_target_actions(
            torch.tanh(mean), cfg.target_policy_noise, cfg.target_noise_clip
        ), None

    def _actor_update(self, x: Tensor) -> dict[str, float]:
        """The actor's step against the critics (and SAC's temperature step)."""
        actor = self._model.actor
        out = actor(x)
        # The critics judge the actor's actions without learning from them; with batch
        # renormalisation they judge by their running statistics, as in acting (CrossQ).
        self.critics.requires_grad_(False)
        try:
            with _in_mode(self.critics, training=not self.cfg.batch_renorm):
                if out.log_std is None:
                    q_pi = self.critics(torch.cat([x, torch.tanh(out.mean)], dim=1))
                    loss = deterministic_actor_loss(q_pi[0])
                    log_prob = None
                else:
                    a_pi, log_prob = squashed_gaussian_sample(out.mean, out.log_std)
                    q_pi = self.critics(torch.cat([x, a_pi], dim=1))
                    loss = sac_actor_loss(q_pi, log_prob, self.temperature.alpha)
        finally:
            self.critics.requires_grad_(True)
        if self.temperature_optimizer is not None and log_prob is not None:
            loss = loss + temperature_loss(
                self.temperature.log_alpha, log_prob.detach(), self.target_entropy
            )
        optimizers = [self.actor_optimizer]
        if self.temperature_optimizer is not None:
            optimizers.append(self.temperature_optimizer)
        saving = self._save_beside(self._actor_undo, self._actor_side, optimizers)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm, finite = average_and_clip(
            self._actor_side, loss, self.cfg.max_grad_norm, self.data_parallel, clip=actor
        )
        taken = step_unless_non_finite(
            self._actor_undo, self._actor_side, optimizers, finite, undo_copy_taken(saving)
        )
        self.skips.record(taken)
        if not taken:
            return {"health/non_finite_updates": 1.0}
        stats = {"losses/actor": loss.item()}
        if log_prob is not None:
            stats["learner/entropy"] = -float(log_prob.detach().mean())
        return stats

    def _to_device(self, b: ReplayBatch) -> _Batch:
        def tensor(x: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(x)).to(self._device, non_blocking=True)

        return _Batch(
            obs={k: tensor(v) for k, v in b.obs.items()},
            next_obs={k: tensor(v) for k, v in b.next_obs.items()},
            actions=tensor(b.actions).float().reshape(len(b.returns), -1),
            returns=tensor(b.returns).float(),
            discounts=tensor(b.discounts).float(),
            weights=tensor(b.weights).float(),
            indices=b.indices,
        )

    # --- optimizers -----------------------------------------------------------------------------
    def _new_optimizers(self) -> None:
        self.critic_optimizer = make_adam(self.critics.parameters(), self.learning_rate, self.cfg)
        self.actor_optimizer = make_adam(
            self._model.actor.parameters(), self.actor_learning_rate, self.cfg
        )
        learned = self.temperature.log_alpha.requires_grad
        # The temperature learns at the critics' rate (as CleanRL's SAC).
        self.temperature_optimizer = (
            make_adam(self.temperature.parameters(), self.learning_rate, self.cfg)
            if learned
            else None
        )

    def _set_learning_rates(self) -> None:
        progress = schedule_progress(self.cfg, self.env_steps)
        schedule = self.cfg.lr_schedule
        set_scheduled_learning_rate(self.critic_optimizer, self.learning_rate, schedule, progress)
        set_scheduled_learning_rate(
            self.actor_optimizer, self.actor_learning_rate, schedule, progress
        )
        if self.temperature_optimizer is not None:  # it learns at the critics' rate
            set_scheduled_learning_rate(
                self.temperature_optimizer, self.learning_rate, schedule, progress
            )

    # --- outside changes ------------------------------------------------------------------------
    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """New critic (and temperature) or actor learning rates, from the next update; the
        schedule decays from them. Other names are ignored."""
        if "learning_rate" in values:
            self.learning_rate = float(values["learning_rate"])
        if "actor_learning_rate" in values:
            self.actor_learning_rate = float(values["actor_learning_rate"])
        self._set_learning_rates()

    def copy_policy(self, model: nn.Module) -> None:
        """Continue from another policy's actor: new optimizer state and target actor."""
        self._model.load_state_dict(model.state_dict())
        self.weights_replaced()
        self._new_optimizers()

    def weights_replaced(self) -> None:
        """Weights set from outside (the Python API): the target actor starts from them too."""
        if self.target_actor is not None:
            self.target_actor.load_state_dict(self._model.actor.state_dict())
        self.policy_version += 1

    def assert_finite(self) -> None:
        raise_unless_finite(self._model, self.actor_optimizer)
        raise_unless_finite(self.critics, self.critic_optimizer)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume exactly but the replay (the stager's)."""

        def state(module: nn.Module | torch.optim.Optimizer | None) -> dict | None:
            return None if module is None else module.state_dict()

        return {
            "model": self._model.state_dict(),
            "critics": self.critics.state_dict(),
            "target_critics": state(self.target_critics),
            "target_actor": state(self.target_actor),
            "temperature": self.temperature.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "temperature_optimizer": state(self.temperature_optimizer),
            **self._counters(),
        }

    def load_state_dict(self, state: dict) -> None:
        load_model(self._model, state["model"])
        load_model(self.critics, state["critics"])
        for module, key in (
            (self.target_critics, "target_critics"),
            (self.target_actor, "target_actor"),
        ):
            if module is not None and state[key] is not None:
                load_model(module, state[key])
        self.temperature.load_state_dict(state["temperature"])
        load_optimizer_state(self.critic_optimizer, state["critic_optimizer"])
        load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        if self.temperature_optimizer is not None and state["temperature_optimizer"] is not None:
            load_optimizer_state(self.temperature_optimizer, state["temperature_optimizer"])
        self._restore_counters(state)


@contextmanager
def _in_mode(module: nn.Module, training: bool) -> Iterator[None]:
    """`module` in training mode `training` for the block, then back as it was."""
    was_training = module.training
    module.train(training)
    try:
        yield
    finally:
        module.train(was_training)


@dataclass(frozen=True)
class _Batch:
    """A replay batch on the learner's device (actions still in the env's units)."""

    obs: dict[str, Tensor]
    next_obs: dict[str, Tensor]
    actions: Tensor
    returns: Tensor
    discounts: Tensor
    weights: Tensor
    indices: np.ndarray
