"""Recurrent cores: the part of the policy that carries memory between steps.

Responsible for: the identity / GRU / LSTM cores and the single flat-state convention, i.e. one
float tensor per env ``[B, state_size]`` (LSTM: h and c concatenated, state_size = 2*rnn_size;
GRU: rnn_size; none: 0), plus the two entry points used by the system:

  * ``step(x [B, F], state [B, S])``: one step for the inference worker;
  * ``sequence(x [T, B, F], state0 [B, S], episode_starts [T, B])``: backprop-through-time for
    the learner, zeroing the state before step t wherever ``episode_starts[t] == 1``.

Must not: know where episode boundaries come from, store states between calls, or encode
observations / produce actions.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

RNN_TYPES = ("none", "gru", "lstm")


class Core(nn.Module):
    """What every core offers: ``out_size`` features per step and a flat ``[B, state_size]``
    state, stepped once (``step``) or over a [T, B] sequence with episode starts
    (``sequence``)."""

    out_size: int
    state_size: int

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class IdentityCore(Core):
    """No memory: out = x, state is an empty [B, 0] tensor passed through unchanged."""

    def __init__(self, in_size: int) -> None:
        super().__init__()
        self.out_size = int(in_size)
        self.state_size = 0

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [B, F], state: [B, 0] -> (out [B, F], state [B, 0])."""
        return x, state

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, B, F] -> (out [T, B, F], state0 [B, 0])."""
        return x, state0


def _reset_boundaries(episode_starts: torch.Tensor) -> list[int]:
    """Time indices 1..T-1 at which at least one env starts a new episode (sorted).

    episode_starts: [T, B]. Index 0 is excluded: resets there are applied to state0 directly.
    """
    inner = episode_starts[1:].any(dim=1)
    # One host sync per call; it lets sequences without resets run as a single fused RNN call.
    return (torch.nonzero(inner).flatten() + 1).tolist()


class _RnnCore(Core):
    """Shared logic for torch.nn.GRU / torch.nn.LSTM cores with a flat [B, S] state."""

    rnn: nn.RNNBase

    def __init__(self, in_size: int, rnn_size: int) -> None:
        super().__init__()
        self.in_size = int(in_size)
        self.rnn_size = int(rnn_size)
        self.out_size = self.rnn_size

    def _init_rnn(self) -> None:
        # Orthogonal recurrent/input weights and zero biases: a stable, common default for RL.
        for name, param in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param)
            else:
                nn.init.zeros_(param)

    def _to_hidden(self, state: torch.Tensor):
        raise NotImplementedError

    def _from_hidden(self, hidden) -> torch.Tensor:
        raise NotImplementedError

    def _run(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One fused RNN call. x: [T, B, F], state: [B, S] -> ([T, B, H], [B, S])."""
        out, hidden = self.rnn(x, self._to_hidden(state))
        return out, self._from_hidden(hidden)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [B, F], state: [B, S] -> (out [B, H], new_state [B, S])."""
        out, new_state = self._run(x.unsqueeze(0), state)
        return out.squeeze(0), new_state

    def sequence(
        self, x: torch.Tensor, state0: torch.Tensor, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run over a whole trajectory with episode resets.

        x: [T, B, F], state0: [B, S], episode_starts: [T, B] (bool or 0/1). The state is zeroed
        before step t for every env with episode_starts[t] set. Returns (out [T, B, H],
        final_state [B, S]). The time axis is split only at steps where some env resets, so a
        reset-free trajectory is a single fused RNN call.
        """
        keep = (~episode_starts.bool()).to(state0.dtype).unsqueeze(-1)  # [T, B, 1]
        bounds = [0, *_reset_boundaries(episode_starts.bool()), x.shape[0]]
        state = state0
        outputs = []
        for start, end in itertools.pairwise(bounds):
            state = state * keep[start]
            out, state = self._run(x[start:end], state)
            outputs.append(out)
        out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=0)
        return out, state


class GruCore(_RnnCore):
    """Single-layer GRU; state [B, rnn_size]."""

    def __init__(self, in_size: int, rnn_size: int) -> None:
        super().__init__(in_size, rnn_size)
        self.rnn = nn.GRU(self.in_size, self.rnn_size)
        self.state_size = self.rnn_size
        self._init_rnn()

    def _to_hidden(self, state: torch.Tensor) -> torch.Tensor:
        return state.unsqueeze(0).contiguous()

    def _from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.squeeze(0)


class LstmCore(_RnnCore):
    """Single-layer LSTM; state [B, 2 * rnn_size] = cat(h, c)."""

    def __init__(self, in_size: int, rnn_size: int) -> None:
        super().__init__(in_size, rnn_size)
        self.rnn = nn.LSTM(self.in_size, self.rnn_size)
        self.state_size = 2 * self.rnn_size
        self._init_rnn()

    def _to_hidden(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state.split(self.rnn_size, dim=1)
        return h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()

    def _from_hidden(self, hidden: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h, c = hidden
        return torch.cat([h.squeeze(0), c.squeeze(0)], dim=1)


def make_core(rnn_type: str, in_size: int, rnn_size: int = 128) -> Core:
    """Build a core by type ("none", "gru", "lstm"). The result has ``out_size``,
    ``state_size``, ``step`` and ``sequence``."""
    if rnn_type == "none":
        return IdentityCore(in_size)
    if rnn_type == "gru":
        return GruCore(in_size, rnn_size)
    if rnn_type == "lstm":
        return LstmCore(in_size, rnn_size)
    raise ValueError(f"unknown rnn_type {rnn_type!r}; allowed: {', '.join(RNN_TYPES)}")
