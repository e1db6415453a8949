"""Why a recorded step is not trained on: each reason by name, and the one place that combines
them (`trainable`).

A step's `valids` entry in the trajectory buffer is 1 when the step may be learned from. Who
steps the env clears it, naming the reason, with `exclude`:

- `TRUNCATION_RESET`: the step that resets an env after a time-limit truncation is no transition
  of any episode (the truncated episode was bootstrapped with its true final observation).
- `ENV_FAULT`: the env crashed or returned non-finite values and was restarted; the step's
  reward and observation are not the env's.
- `SEAT_OUT_OF_PLAY`: a multi-agent seat whose agent is out until its env's episode ends; what
  it "does" has no effect.
- `RESENT_ACTION`: the action was asked for again after an inference worker died, so it may
  have been overwritten after the env used it; its log-probability is not the behaviour one.

The learner's side adds two more when it reads the step, through `trainable`:

- `OTHER_POLICY`: the step was played by another policy (rows change policy at episode
  boundaries); each learner trains only on its own policy's samples.
- `TOO_STALE`: the step is more than `max_policy_lag` SGD steps older than the policy.

Value targets (GAE, V-trace) use the recorded and own-policy mask; the loss also leaves out the
stale steps.
"""

from __future__ import annotations

import enum
from typing import Any

import torch


class Excluded(enum.Enum):
    """The reasons a step is not trained on (see the module docstring)."""

    TRUNCATION_RESET = "truncation_reset"
    ENV_FAULT = "env_fault"
    SEAT_OUT_OF_PLAY = "seat_out_of_play"
    RESENT_ACTION = "resent_action"
    OTHER_POLICY = "other_policy"
    TOO_STALE = "too_stale"


RECORDED = (
    Excluded.TRUNCATION_RESET,
    Excluded.ENV_FAULT,
    Excluded.SEAT_OUT_OF_PLAY,
    Excluded.RESENT_ACTION,
)


def exclude(valids: Any, where: Any, reason: Excluded) -> None:
    """Mark the steps of `valids` (a numpy view of the buffer's row) at `where` as not to be
    trained on, for `reason` (one of `RECORDED`)."""
    if reason not in RECORDED:
        raise ValueError(f"{reason} is decided by the learner, not recorded with the step")
    valids[where] = 0.0


def trainable(
    recorded: torch.Tensor,
    policy_ids: torch.Tensor,
    policy_id: int,
    lags: torch.Tensor | None = None,
    max_policy_lag: int | None = None,
) -> torch.Tensor:
    """The 0/1 mask of the steps `policy_id`'s learner trains on: recorded as valid, played by
    that policy (`OTHER_POLICY`), and, given `lags`, at most `max_policy_lag` SGD steps old
    (`TOO_STALE`). Same shape and dtype as `recorded`."""
    mask = recorded * (policy_ids == policy_id).to(recorded.dtype)
    if lags is not None:
        if max_policy_lag is None:
            raise ValueError("trainable: lags given without max_policy_lag")
        mask = mask * (lags <= max_policy_lag).to(recorded.dtype)
    return mask
