"""ValueLearner: the update rule of the value-based algorithms (DQN through Rainbow, QR-DQN,
IQN, FQF, M-DQN), composed by `ValueSettings`.

Given replay batches (`learners/replay_stager.py`), each one SGD step: the online network
evaluates the sampled states (and, for Double DQN, the bootstrap states), a target network the
bootstrap states, and the TD loss of the Q head (`algo/q_learning.py`) is minimised, weighted by
the replay's importance weights; the per-sample losses go back to the replay as priorities. With
`learner_bootstrap_thread` the two bootstrap passes run on a second thread
(`learners/bootstrap_thread.py`), the target network's for the next batch of a take while this
update's backward pass runs, unless this update syncs the target network; so does the copy a
non-finite step is undone from. The
target network follows the online one every `target_update_period` updates, by a hard copy
(`target_tau` = 1) or Polyak averaging. After every step the new weights are published through
`on_sgd_step`, with the env steps trained on, from which inference anneals epsilon.

Must not: touch queues, processes or files; everything resumable is in `state_dict()`.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, cast

import numpy as np
import torch
from torch import Tensor, nn

from sampleforge.algo.q_learning import (
    TDBatch,
    TDLoss,
    categorical_td_loss,
    fqf_fraction_loss,
    quantile_td_loss,
    scalar_td_loss,
)
from sampleforge.buffers.replay import ReplayBatch
from sampleforge.config import Config
from sampleforge.learners.bootstrap_thread import BootstrapThread, undo_copy_taken
from sampleforge.learners.optimization import (
    all_ranks,
    average_and_clip,
    encoder_compute_dtype,
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
from sampleforge.models.q_heads import (
    CategoricalQHead,
    CategoricalQOutput,
    FQFOutput,
    ImplicitQuantileHead,
    QuantileQOutput,
    sample_fractions,
)
from sampleforge.models.q_network import QNetwork, QOutput
from sampleforge.models.q_policy import QPolicy

# What `set_hyperparameters` changes (the Python API accepts exactly these names, through
# learners/registry.py); other names are ignored.
HYPERPARAMETERS = ("learning_rate",)

# A replay batch on the learner's device: the TD inputs, the states and the bootstrap states.
_DeviceBatch = tuple[TDBatch, dict[str, Tensor], dict[str, Tensor]]


@dataclass(frozen=True)
class _TargetPass:
    """The target network's outputs an update needs: at the bootstrap states, and (Munchausen)
    its Q-values at the sampled states."""

    next: QOutput
    q_now: Tensor | None


class ValueLearner(ReplayLearning):
    """A value-based policy's training state and update rule (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        model: QPolicy,
        stager: ReplayStager,
        device: torch.device,
        frameskip: int,
        policy_id: int = 0,
    ):
        super().__init__(cfg, stager, device, frameskip, policy_id)
        self._model = model.to(device)
        self._model.network.train()
        self.network.encoder_compute_dtype = encoder_compute_dtype(cfg)
        self.target = copy.deepcopy(self.network).to(device)
        self.target.requires_grad_(False)
        self.learning_rate = cfg.learning_rate
        self.optimizer = self._new_optimizer()
        self.fraction_optimizer = self._new_fraction_optimizer()
        self._step_undo = StepUndo()
        self._bootstrap = BootstrapThread(cfg.learner_bootstrap_thread)
        network = self.network
        self._samples_loss_fractions = (
            isinstance(network.head, ImplicitQuantileHead) and network.fraction_head is None
        )

    # --- Trains ---------------------------------------------------------------------------------
    @property
    def model(self) -> QPolicy:
        return self._model

    @property
    def network(self) -> QNetwork:
        return self._model.network

    def train(self, data: list[ReplayBatch], on_sgd_step: Callable[[], None]) -> dict[str, float]:
        """One SGD step per batch; returns averaged statistics."""
        self._set_learning_rate()
        self._anneal_priority_beta()
        totals: dict[str, float] = {}
        on_device = [self._to_device(b) for b in data]
        prefetched: Future[_TargetPass] | None = None
        for i, replay_batch in enumerate(data):
            following = on_device[i + 1] if i + 1 < len(data) else None
            stats, prefetched = self._update(replay_batch, on_device[i], prefetched, following)
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v
            self._published(self._model, on_sgd_step)
        out = {k: v / max(len(data), 1) for k, v in totals.items()}
        out.update(self._report())
        return out

    def _report(self) -> dict[str, float]:
        eps = self._model.epsilons(1, None, torch.device("cpu"))
        return {
            **self.stager.report(self.cfg.replay_size),
            "learner/lr": self.optimizer.param_groups[0]["lr"],
            "learner/epsilon": float(eps[0]),
            "health/skipped_updates": float(self.skipped_updates),
        }

    # --- one update -----------------------------------------------------------------------------
    def _update(
        self,
        replay_batch: ReplayBatch,
        on_device: _DeviceBatch,
        prefetched: Future[_TargetPass] | None,
        following: _DeviceBatch | None,
    ) -> tuple[dict[str, float], Future[_TargetPass] | None]:
        """One SGD step on `replay_batch`, with the target pass `prefetched` for it, if any;
        returns its statistics and the target pass started for the `following` batch."""
        batch, obs, next_obs = on_device
        if prefetched is not None:
            prefetched.result()  # done whatever follows: the target noise must not change under it
        # Checked before the loss: the categorical projection turns a non-finite return or
        # discount into an out-of-range atom index (an IndexError, not a NaN loss to skip).
        targets = torch.cat([batch.returns, batch.discounts, batch.weights])
        if not all_ranks(bool(torch.isfinite(targets).all()), self.data_parallel):
            self._step(False)
            return {"health/non_finite_updates": 1.0}, None
        self.network.update_normalizer(obs)
        self.network.reset_noise()
        if prefetched is None:
            self.target.reset_noise()
        td = self._td_loss(batch, obs, next_obs, prefetched)
        saving, following_pass = None, None
        if self._bootstrap.concurrent:
            # The copy a non-finite step would be undone from: the parameters and Adam's
            # moments stay as they are until the step, so it is taken beside the backward pass.
            saving = self._bootstrap.submit(self._save_for_undo)
        if following is not None and self._bootstrap.concurrent and not self._syncs_target():
            following_pass = self._start_target_pass(following[1], following[2])
        return self._descend(replay_batch, td, saving), following_pass

    def _descend(
        self, replay_batch: ReplayBatch, td: TDLoss, saving: Future[None] | None
    ) -> dict[str, float]:
        """The SGD step on the TD loss; the priorities back to the replay; the target sync."""
        for optimizer in self._optimizers():  # FQF's proposal has an optimizer of its own
            optimizer.zero_grad(set_to_none=True)
        td.loss.backward()
        grad_norm, finite = average_and_clip(
            self.network, td.loss, self.cfg.max_grad_norm, self.data_parallel
        )
        if not self._step(finite, saved=undo_copy_taken(saving)):
            return {"health/non_finite_updates": 1.0}
        if self.cfg.prioritized_replay:
            self.stager.sampler.update_priorities(
                replay_batch.indices, td.priorities.double().cpu().numpy()
            )
        self.updates += 1
        self.policy_version += 1
        if self.updates % self.cfg.target_update_period == 0:
            polyak_update(self.target, self.network, self.cfg.target_tau)
        return {
            "losses/td": td.loss.item(),
            "learner/q_taken": float(td.q_taken.mean()),
            "learner/grad_norm": grad_norm,
        }

    def _syncs_target(self) -> bool:
        """Whether the update now running, if taken, moves the target network."""
        return (self.updates + 1) % self.cfg.target_update_period == 0

    def _start_target_pass(
        self, obs: dict[str, Tensor], next_obs: dict[str, Tensor]
    ) -> Future[_TargetPass]:
        """The next batch's target pass, on the bootstrap thread, with fresh target noise."""
        self.target.reset_noise()
        return self._bootstrap.submit(self._target_pass, obs, next_obs)

    def _target_pass(self, obs: dict[str, Tensor], next_obs: dict[str, Tensor]) -> _TargetPass:
        target = self.target
        rows = next(iter(next_obs.values())).shape[0]
        return _TargetPass(
            next=target(next_obs, self._loss_fractions(rows)),
            q_now=target(obs).q if self.cfg.munchausen else None,
        )

    def _loss_fractions(self, rows: int) -> Tensor | None:
        """IQN's fractions for the loss, tau ~ U[0, 1]: N = N' = `num_quantiles` per row for
        the online and the target quantiles (Dabney et al. 2018b); Q-values for acting and
        Double DQN's argmax average the network's K. None for the other heads (FQF's proposal
        picks its own)."""
        if not self._samples_loss_fractions:
            return None
        return sample_fractions(rows, self.cfg.num_quantiles, device=self._device)

    def _to_device(self, b: ReplayBatch) -> _DeviceBatch:
        def tensor(x: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(x)).to(self._device, non_blocking=True)

        batch = TDBatch(
            actions=tensor(b.actions).long().reshape(-1),
            returns=tensor(b.returns).float(),
            discounts=tensor(b.discounts).float(),
            weights=tensor(b.weights).float(),
        )
        obs = {k: tensor(v) for k, v in b.obs.items()}
        next_obs = {k: tensor(v) for k, v in b.next_obs.items()}
        return batch, obs, next_obs

    def _td_loss(
        self,
        batch: TDBatch,
        obs: dict[str, Tensor],
        next_obs: dict[str, Tensor],
        prefetched: Future[_TargetPass] | None,
    ) -> TDLoss:
        cfg, online = self.cfg, self.network
        # The next observations apart, without a graph: encoded in one batch with `obs`, the
        # backward pass would run the encoder over both halves. On the bootstrap thread they
        # start first and run beside the forward pass; inline, in the order they always ran.
        fractions = self._loss_fractions(len(batch.actions))
        if self._bootstrap.concurrent:
            next_online = self._bootstrap.submit(self._online_q, next_obs)
            target_pass = prefetched or self._bootstrap.submit(self._target_pass, obs, next_obs)
            features = online.encode(obs)
            out = online.head_output(features, fractions)
        else:
            features = online.encode(obs)
            out = online.head_output(features, fractions)
            next_online = self._bootstrap.submit(self._online_q, next_obs)
            target_pass = prefetched or self._bootstrap.submit(self._target_pass, obs, next_obs)
        next_online_q = next_online.result()
        bootstrap = target_pass.result()
        next_target, target_q_now = bootstrap.next, bootstrap.q_now
        if isinstance(out, CategoricalQOutput):
            assert isinstance(next_target, CategoricalQOutput)
            return categorical_td_loss(
                cfg,
                logits=out.logits,
                next_online_q=next_online_q,
                next_target_logits=next_target.logits,
                support=cast(CategoricalQHead, online.head).support,
                batch=batch,
            )
        if isinstance(out, QuantileQOutput):
            assert isinstance(next_target, QuantileQOutput)
            td = quantile_td_loss(
                cfg,
                quantiles=out.quantiles,
                fractions=out.fractions,
                next_online_q=next_online_q,
                next_target_quantiles=next_target.quantiles,
                next_target_q=next_target.q,
                batch=batch,
            )
            if isinstance(out, FQFOutput):
                td = self._with_fraction_loss(td, features, batch.actions)
            return td
        return scalar_td_loss(
            cfg,
            q=out.q,
            next_online_q=next_online_q,
            next_target_q=next_target.q,
            batch=batch,
            target_q_now=target_q_now,
        )

    def _online_q(self, next_obs: dict[str, Tensor]) -> Tensor:
        return self.network(next_obs).q

    def _with_fraction_loss(self, td: TDLoss, features: Tensor, actions: Tensor) -> TDLoss:
        """FQF: the proposal learns by its own loss and optimizer, on features it does not
        train; the quantile values it reads are constants (Yang et al. 2019, Proposition 1)."""
        proposal_head = self.network.fraction_head
        assert proposal_head is not None
        features = features.detach()
        proposal = proposal_head(features)
        with torch.no_grad():
            at_tau = self.network.head_output(features, proposal.tau[:, 1:-1].detach())
            at_tau_hat = self.network.head_output(features, proposal.tau_hat.detach())
        assert isinstance(at_tau, QuantileQOutput) and isinstance(at_tau_hat, QuantileQOutput)
        loss = fqf_fraction_loss(
            tau=proposal.tau,
            quantiles_at_tau=at_tau.quantiles,
            quantiles_at_tau_hat=at_tau_hat.quantiles,
            actions=actions,
        )
        return TDLoss(loss=td.loss + loss, priorities=td.priorities, q_taken=td.q_taken)

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.optimizer, self.fraction_optimizer) if o is not None]

    def _save_for_undo(self) -> None:
        self._step_undo.save(self.network, self._optimizers())

    def _step(self, finite: bool, saved: bool = False) -> bool:
        """The optimizer step, unless the loss, the gradient or the result is not finite
        (`saved`: the undo copy for it is taken)."""
        taken = step_unless_non_finite(
            self._step_undo, self.network, self._optimizers(), finite, saved
        )
        self.skips.record(taken)
        return taken

    def _set_learning_rate(self) -> None:
        set_scheduled_learning_rate(
            self.optimizer,
            self.learning_rate,
            self.cfg.lr_schedule,
            schedule_progress(self.cfg, self.env_steps),
        )

    def _trained_parameters(self) -> list[nn.Parameter]:
        """Every parameter but FQF's fraction proposal (its own optimizer trains it)."""
        proposal = self.network.fraction_head
        skip = set() if proposal is None else {id(p) for p in proposal.parameters()}
        return [p for p in self.network.parameters() if id(p) not in skip]

    def _new_optimizer(self) -> torch.optim.Optimizer:
        return make_adam(self._trained_parameters(), self.learning_rate, self.cfg)

    def _new_fraction_optimizer(self) -> torch.optim.Optimizer | None:
        proposal = self.network.fraction_head
        if proposal is None:
            return None
        # FQF trains its proposal with RMSprop at a tiny rate (Yang et al. 2019, Appendix B).
        return torch.optim.RMSprop(
            proposal.parameters(), lr=self.cfg.fraction_lr, alpha=0.95, eps=0.00001
        )

    # --- outside changes ------------------------------------------------------------------------
    def set_hyperparameters(self, values: dict[str, float]) -> None:
        if "learning_rate" in values:
            self.learning_rate = float(values["learning_rate"])
            self._set_learning_rate()

    def copy_policy(self, model: nn.Module) -> None:
        """Continue from another policy's weights: new optimizer state and target network."""
        self._model.load_state_dict(model.state_dict())
        self.target.load_state_dict(self.network.state_dict())
        self.optimizer = self._new_optimizer()
        self.fraction_optimizer = self._new_fraction_optimizer()
        self.policy_version += 1

    def weights_replaced(self) -> None:
        """Weights set from outside (the Python API): the target starts from them too."""
        self.target.load_state_dict(self.network.state_dict())
        self.policy_version += 1

    def assert_finite(self) -> None:
        raise_unless_finite(self._model, self.optimizer)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume exactly but the replay (the stager's)."""
        return {
            "model": self._model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "fraction_optimizer": None
            if self.fraction_optimizer is None
            else self.fraction_optimizer.state_dict(),
            **self._counters(),
        }

    def load_state_dict(self, state: dict) -> None:
        load_model(self._model, state["model"])
        self.target.load_state_dict(state["target"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        if self.fraction_optimizer is not None and state["fraction_optimizer"] is not None:
            load_optimizer_state(self.fraction_optimizer, state["fraction_optimizer"])
        self._restore_counters(state)
