"""What every learner family's optimizer step shares: gradients averaged over the ranks of a
data-parallel run and clipped (`average_and_clip`), the non-finite checks
that keep a bad update out of inference and checkpoints (a step undone, `step_unless_non_finite`,
and counted, `SkippedUpdates`), loading weights with a clear error and optimizer state with this run's settings
(`load_optimizer_state`), the Adam the replay learners
build (`make_adam`), how their target networks follow (`polyak_update`) and the precision the
learner's encoders compute in (`encoder_compute_dtype`).

Must not: know losses, data or processes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch
from torch import nn

from sampleforge.config import Config
from sampleforge.learners.step_undo import StepUndo


class NonFiniteTrainingError(RuntimeError):
    """Training kept producing non-finite losses, gradients or parameters."""


def encoder_compute_dtype(cfg: Config) -> torch.dtype | None:
    """The dtype `learner_precision` asks the learner's encoders to compute in (None: their
    weights' float32); see `models/encoders.py: encode`."""
    return {"float32": None, "bfloat16": torch.bfloat16}[cfg.learner_precision]


def clip_gradients(model: nn.Module, max_grad_norm: float) -> float:
    """Clip the gradient norm of `model`'s parameters to `max_grad_norm` (0: no clipping);
    returns the norm before clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = max_grad_norm if max_grad_norm > 0 else math.inf
    return float(nn.utils.clip_grad_norm_(params, max_norm))


class DataParallel(Protocol):
    """The other ranks' learners of this policy, in a data-parallel run
    (`distributed/learner_group.py: LearnerGroup`)."""

    def average_gradients(self, params: Iterable[nn.Parameter], local_ok: bool) -> bool:
        """Average the gradients over the ranks; whether `local_ok` held on every rank."""
        ...

    def all_true(self, flag: bool) -> bool:
        """Whether `flag` holds on every rank."""
        ...


def average_and_clip(
    module: nn.Module,
    loss: torch.Tensor,
    max_grad_norm: float,
    data_parallel: DataParallel | None,
    clip: nn.Module | None = None,
) -> tuple[float, bool]:
    """After backward: average `module`'s gradients over the ranks (data-parallel runs), then
    clip `clip`'s (default: `module`'s). Returns the norm before clipping and whether the step
    may be taken: every rank's loss and the norm finite (the same answer on every rank)."""
    finite = math.isfinite(loss.item())
    if data_parallel is not None:
        finite = data_parallel.average_gradients(module.parameters(), finite)
    grad_norm = clip_gradients(module if clip is None else clip, max_grad_norm)
    return grad_norm, finite and math.isfinite(grad_norm)


def all_ranks(flag: bool, data_parallel: DataParallel | None) -> bool:
    """`flag` agreed by every rank (this rank's alone outside data-parallel runs)."""
    return flag if data_parallel is None else data_parallel.all_true(flag)


def non_finite_entries(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Names of the model's state and the optimizer's statistics holding a non-finite value."""
    bad = [
        name
        for name, t in model.state_dict().items()
        if t.is_floating_point() and not torch.isfinite(t).all()
    ]
    for group in optimizer.state.values():
        bad += [
            k
            for k, t in group.items()
            if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()
        ]
    return bad


def raise_unless_finite(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """NonFiniteTrainingError naming the first non-finite entries, if any (never checkpoint
    one)."""
    bad = non_finite_entries(model, optimizer)
    if bad:
        raise NonFiniteTrainingError(
            f"non-finite values in {', '.join(bad[:5])}; refusing to write a checkpoint"
        )


def schedule_progress(cfg: Config, env_steps: int) -> float:
    """How far the learning-rate schedule has run: env steps over its horizon,
    `lr_decay_env_steps`, or the budget `train_for_env_steps` when that is 0."""
    return env_steps / (cfg.lr_decay_env_steps or cfg.train_for_env_steps)


def set_scheduled_learning_rate(
    optimizer: torch.optim.Optimizer, base: float, schedule: str, progress: float
) -> None:
    """Every param group's rate: `base`, or with the linear schedule `base` decayed to 0 as
    `progress` (`schedule_progress`) reaches 1."""
    lr = base * max(0.0, 1.0 - progress) if schedule == "linear" else base
    for group in optimizer.param_groups:
        group["lr"] = lr


def load_model(model: nn.Module, state: dict) -> None:
    """`model.load_state_dict(state)`, with a one-line ValueError when it does not fit."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ValueError(
            f"checkpoint does not fit this model ({'; '.join(lines[:2])}); was it "
            "written for another env or model config?"
        ) from None


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Continue `optimizer` from a checkpoint's `state`: its moments and step counts, but this
    optimizer's own settings (learning rate, betas, eps, ...). `Optimizer.load_state_dict`
    would bring back the checkpoint's settings too, so a run resumed or restored with a new
    `--adam_eps` or `--adam_beta2` would go on with the old ones, unannounced."""
    settings = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, settings, strict=True):
        group.update(own)


def step_unless_non_finite(
    undo: StepUndo,
    model: nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    finite: bool,
    saved: bool = False,
) -> bool:
    """Step every optimizer (gradients already computed and clipped), unless `finite` is
    False (the loss or the gradient norm was not) or the step leaves a non-finite value in
    `model`'s parameters or the optimizers' state, which `undo` then puts back as it was.
    `saved`: `undo` already holds what this step may have to put back (saved since the last
    step, while nothing changed the parameters). A step not taken clears the gradients.
    Returns whether the step was taken."""
    if finite:
        # A finite gradient can still make non-finite weights (a huge learning rate): such a
        # step is undone before anything sees it, and skipped like a non-finite loss.
        if not saved:
            undo.save(model, optimizers)
        for optimizer in optimizers:
            optimizer.step()
        finite = undo.finite()
        if not finite:
            undo.restore()
    if not finite:
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
    return finite


class SkippedUpdates:
    """Counts the updates skipped for non-finite values; after `limit` in a row, training
    stops with NonFiniteTrainingError (a run that cannot recover should fail, not idle)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.in_a_row = 0

    def record(self, taken: bool) -> None:
        """Count one update, taken or skipped; raise after `limit` skips in a row."""
        if taken:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            raise NonFiniteTrainingError(
                f"{self.in_a_row} updates in a row had a non-finite loss, gradient or result "
                "(each was skipped); check rewards and observations, or lower learning_rate"
            )


def make_adam(params: Iterable[nn.Parameter], lr: float, cfg: Config) -> torch.optim.Optimizer:
    """Adam at `lr` with `cfg`'s betas and eps, fused: one kernel per parameter for the whole
    update, on the CPU as on CUDA (torch's CPU default steps each tensor through a dozen
    kernels, a large share of a small network's update; fused is 6% more SAC updates a
    second than `foreach` on HalfCheetah's networks here)."""
    return torch.optim.Adam(
        params, lr=lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, fused=True
    )


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau online + (1 - tau) target, parameter by parameter (tau 1: a hard copy);
    buffers (normaliser and batch-norm statistics) are copied."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        target_buffer.copy_(online_buffer)
