"""PQNLearner: the update rule of PQN (Gallici et al. 2024, "Simplifying Deep Temporal
Difference Learning"), Q-learning on fresh rollouts with no replay and no target network.

Given a time-major dataset of whole trajectories (`learners/batcher.py`, as the actor-critic
family gets them), one `train` call:

1. evaluates max_a Q(s_t, a) at every step t = 0..T with the current network (no gradient);
2. computes Peng's Q(lambda) targets G_t over each trajectory (`algo/value_targets.py`,
   the paper's eq. 7), restarting at steps this policy did not play or that are not
   transitions (`buffers/step_validity.py`);
3. runs `num_epochs` passes of `num_batches_per_epoch` minibatches of single steps shuffled
   across the dataset, minimising mean 0.5 (Q(s_t, a_t) - G_t)^2 over the steps it trains on
   (LayerNorm in the network keeps this stable without a target network, the paper's sec. 4).

The optimizer is RAdam, as the paper's and CleanRL's recipe (Adam's update without its
first-steps variance problem, so no warm-up is needed at the start of a run). After every step
the new weights are published through `on_sgd_step`, with the env steps trained on, from which
inference anneals epsilon (`models/q_policy.py`).

Must not: touch queues, processes or files; everything resumable is in `state_dict()`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from sampleforge.algo.q_learning import taken_actions
from sampleforge.algo.value_targets import q_lambda_targets
from sampleforge.buffers.step_validity import trainable
from sampleforge.config import Config
from sampleforge.learners.batcher import Dataset, minibatch_size
from sampleforge.learners.optimization import (
    DataParallel,
    SkippedUpdates,
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
from sampleforge.models.q_network import QNetwork
from sampleforge.models.q_policy import QPolicy

# What `set_hyperparameters` changes (the Python API accepts exactly these names, through
# learners/registry.py). PBT mutates entropy_coeff for every family too; PQN has no entropy
# term, so from PBT that one is accepted and changes nothing.
HYPERPARAMETERS = ("learning_rate", "adam_beta1")
_NOT_APPLICABLE = ("entropy_coeff",)

# The mean policy lag, in datasets, that PQN's measured sampling lead may reach (see
# learners/sampling_gate.py). Its targets come from the learner's current network (step 1), not
# from the behaviour policy's values, so data one dataset old costs it little; and a lead of a
# whole dataset is what lets the next dataset's sampling overlap the many SGD steps of this one.
# With the actor-critic's lag target (10 SGD steps: a lead of 4 at 16 steps a dataset) PQN's
# learner waited for data 36% of an Atari run on 2 cores.
PQN_LAG_TARGET_DATASETS = 1.0


class PQNLearner:
    """A PQN policy's training state and update rule (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        model: QPolicy,
        device: torch.device,
        frameskip: int = 1,
        policy_id: int = 0,
    ):
        self.cfg = cfg
        self._model = model.to(device)
        self._model.network.train()
        self._model.network.encoder_compute_dtype = encoder_compute_dtype(cfg)
        self._device = device
        self.frameskip = frameskip
        self.policy_id = policy_id
        self.hyperparameters = {name: float(getattr(cfg, name)) for name in HYPERPARAMETERS}
        self.optimizer = self._new_optimizer()
        self._policy_version = 0
        self._env_steps = 0
        self.data_parallel: DataParallel | None = None  # the other ranks (distributed runs)
        self.skips = SkippedUpdates(cfg.max_consecutive_skipped_updates)
        self._step_undo = StepUndo()

    # --- Trains ---------------------------------------------------------------------------------
    @property
    def model(self) -> QPolicy:
        return self._model

    @property
    def network(self) -> QNetwork:
        return self._model.network

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def env_steps(self) -> int:
        return self._env_steps

    @env_steps.setter
    def env_steps(self, value: int) -> None:
        self._env_steps = value

    @property
    def policy_version(self) -> int:
        return self._policy_version

    @property
    def sgd_steps_per_dataset(self) -> int:
        return self.cfg.num_epochs * self.cfg.num_batches_per_epoch

    def train(self, data: Dataset, on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """`num_epochs` passes of minibatch SGD over `data` on its Q(lambda) targets; returns
        averaged statistics."""
        self._set_learning_rate()
        self.network.update_normalizer({k: v[:-1].flatten(0, 1) for k, v in data.obs.items()})
        samples, report = self._prepare(data)
        self._env_steps += int((data.policy_ids[:-1] == self.policy_id).sum()) * self.frameskip
        totals: dict[str, float] = {}
        count = samples["targets"].shape[0]
        batch_size = minibatch_size(count, self.cfg.num_batches_per_epoch)
        for _ in range(self.cfg.num_epochs):
            order = torch.randperm(count, device=self._device)
            for start in range(0, count - batch_size + 1, batch_size):
                index = order[start : start + batch_size]
                stats = self._sgd_step({k: v.index_select(0, index) for k, v in samples.items()})
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                self._model.set_trained_env_steps(self._env_steps)
                on_sgd_step()
        out = {k: v / max(self.sgd_steps_per_dataset, 1) for k, v in totals.items()}
        out.update(report)
        out.update(
            {
                "learner/lr": self.optimizer.param_groups[0]["lr"],
                "learner/epsilon": float(self._model.epsilons(1, None, torch.device("cpu"))[0]),
                "health/skipped_updates": float(self.skips.total),
            }
        )
        return out

    # --- targets --------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self, data: Dataset) -> tuple[dict[str, Tensor], dict[str, float]]:
        """Every step of `data` as one sample [T * B, ...] with its Q(lambda) target and
        whether it is trained on; and the policy-lag statistics of this policy's steps."""
        steps, batch = data.rewards.shape[0] - 1, data.rewards.shape[1]
        flat_obs = {k: v.flatten(0, 1) for k, v in data.obs.items()}
        max_q = self.network.q_values(flat_obs).max(dim=1).values.view(steps + 1, batch)
        rewards = data.rewards[:-1] * self.cfg.reward_scale
        if self.cfg.reward_clip is not None:
            rewards = rewards.clamp(-self.cfg.reward_clip, self.cfg.reward_clip)
        # Targets run through recorded steps of this policy only; the loss also leaves out
        # steps older than max_policy_lag (as the actor-critic's).
        own = trainable(data.valids[:-1], data.policy_ids[:-1], self.policy_id)
        targets = q_lambda_targets(
            rewards=rewards,
            dones=data.dones[:-1],
            valids=own,
            max_q=max_q[:-1],
            bootstrap_max_q=max_q[-1],
            gamma=self.cfg.gamma,
            lambda_=self.cfg.q_lambda,
        )
        lags = (self._policy_version - data.policy_versions[:-1]).float()
        trained = trainable(
            own, data.policy_ids[:-1], self.policy_id, lags, self.cfg.max_policy_lag
        )
        samples = {f"obs.{k}": v[:-1].flatten(0, 1) for k, v in data.obs.items()}
        samples.update(
            actions=data.actions[:-1].reshape(-1).long(),
            targets=targets.flatten(),
            weights=trained.flatten(),
        )
        return samples, _lag_stats(lags, own, self.cfg.max_policy_lag)

    # --- one update -----------------------------------------------------------------------------
    def _sgd_step(self, batch: dict[str, Tensor]) -> dict[str, float]:
        obs = {k.removeprefix("obs."): v for k, v in batch.items() if k.startswith("obs.")}
        q_taken = taken_actions(self.network.q_values(obs), batch["actions"])
        weights = batch["weights"]
        # 0.5 (Q - G)^2, averaged over the steps trained on (none: a zero loss, no update).
        loss = (weights * 0.5 * (q_taken - batch["targets"]).pow(2)).sum() / weights.sum().clamp(
            min=1.0
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm, finite = average_and_clip(
            self.network, loss, self.cfg.max_grad_norm, self.data_parallel
        )
        taken = step_unless_non_finite(self._step_undo, self.network, [self.optimizer], finite)
        self.skips.record(taken)
        if not taken:
            return {"health/non_finite_updates": 1.0}
        self._policy_version += 1
        return {
            "losses/td": loss.item(),
            "learner/q_taken": float((weights * q_taken.detach()).sum() / weights.sum().clamp(1.0)),
            "learner/grad_norm": grad_norm,
        }

    def _set_learning_rate(self) -> None:
        set_scheduled_learning_rate(
            self.optimizer,
            self.hyperparameters["learning_rate"],
            self.cfg.lr_schedule,
            schedule_progress(self.cfg, self._env_steps),
        )

    def _new_optimizer(self) -> torch.optim.Optimizer:
        h = self.hyperparameters
        return torch.optim.RAdam(
            self.network.parameters(),
            lr=h["learning_rate"],
            betas=(h["adam_beta1"], self.cfg.adam_beta2),
            eps=self.cfg.adam_eps,
            # Multi-tensor kernels: torch picks the per-tensor loop on the CPU, 2x slower here.
            foreach=True,
        )

    # --- outside changes ------------------------------------------------------------------------
    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """Use a new learning rate or Adam beta1 from the next SGD step (PBT)."""
        unknown = set(values) - set(HYPERPARAMETERS) - set(_NOT_APPLICABLE)
        if unknown:
            raise KeyError(
                f"unknown learner hyperparameters {sorted(unknown)}; "
                f"allowed: {sorted(HYPERPARAMETERS + _NOT_APPLICABLE)}"
            )
        self.hyperparameters.update(
            {k: float(v) for k, v in values.items() if k in HYPERPARAMETERS}
        )
        for group in self.optimizer.param_groups:
            group["betas"] = (self.hyperparameters["adam_beta1"], self.cfg.adam_beta2)
        self._set_learning_rate()

    def copy_policy(self, model: nn.Module) -> None:
        """Continue from another policy's weights (PBT): its optimizer moments belong to its
        own path through parameter space, so the optimizer starts afresh."""
        self._model.load_state_dict(model.state_dict())
        self.optimizer = self._new_optimizer()
        self._policy_version += 1

    def weights_replaced(self) -> None:
        """Weights set from outside (the Python API): inference picks them up at once."""
        self._policy_version += 1

    def assert_finite(self) -> None:
        raise_unless_finite(self._model, self.optimizer)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume exactly (plain tensors and numbers only)."""
        return {
            "model": self._model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "policy_version": self._policy_version,
            "env_steps": self._env_steps,
            "skipped_updates": self.skips.total,
        }

    def load_state_dict(self, state: dict) -> None:
        load_model(self._model, state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self._policy_version = int(state["policy_version"])
        self._env_steps = int(state["env_steps"])
        self.skips.total = int(state.get("skipped_updates", 0))
        # The hyperparameters are the config's again (as the actor-critic's): with PBT the
        # runner re-sends the population's.


def _lag_stats(lags: Tensor, own: Tensor, max_policy_lag: int) -> dict[str, float]:
    """Policy lag (SGD steps between acting and now) over this policy's valid steps."""
    mine = lags[own > 0]
    if mine.numel() == 0:  # a dataset of none of our steps: nothing lagged
        mine = torch.zeros(1)
    return {
        "policy_lag/min": float(mine.min()),
        "policy_lag/mean": float(mine.mean()),
        "policy_lag/max": float(mine.max()),
        "learner/dropped_stale_fraction": float((mine > max_policy_lag).float().mean()),
    }
