"""A policy running in the caller's process: env observations in, env actions out.

Responsibility: wrap a `Policy` (models/policy.py: a local copy of a policy's weights, on the CPU by
default) so that raw Gymnasium observations, one or a batch, become actions in the form
``env.step`` expects, carrying the recurrent state between calls. Used by the Python API's
``predict`` and ``evaluate``, the evaluation process, ``sampleforge enjoy`` and ``eval``.

Must not: step environments, train, read files, or talk to other processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sampleforge.config import Config
from sampleforge.models.factory import make_policy_model
from sampleforge.models.policy import Policy
from sampleforge.spaces import actions_to_env, observation_array, observation_to_dict


class WeightsDoNotFit(ValueError):
    """Weights whose names or shapes are not those of the network a config describes."""


def load_fitting(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """`model.load_state_dict`, with a mismatch as a one-line WeightsDoNotFit."""
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        first = f" ({lines[1]})" if len(lines) > 1 else ""
        raise WeightsDoNotFit(f"do not fit this model's network: {lines[0]}{first}") from None


class LocalPolicy:
    """A policy network in this process, with the spaces it acts in."""

    def __init__(
        self, *, model: Policy, observation_space: gym.Space, action_space: gym.Space
    ) -> None:
        self.model = model.eval()
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = next(model.parameters()).device

    @classmethod
    def build(
        cls,
        cfg: Config,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
    ) -> "LocalPolicy":
        """The network `cfg` describes, with `state_dict` loaded if given."""
        model = make_policy_model(cfg, observation_space, action_space)
        if state_dict is not None:
            load_fitting(model, state_dict)
        return cls(
            model=model.to(device), observation_space=observation_space, action_space=action_space
        )

    @property
    def rnn_state_size(self) -> int:
        """Size S of one env's recurrent state (0 without a recurrent core)."""
        return int(self.model.rnn_state_size)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """Zero recurrent states [batch_size, S] for envs starting an episode."""
        return torch.zeros(batch_size, self.rnn_state_size, device=self.device)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Replace the weights (the layout must match the config the policy was built from:
        WeightsDoNotFit otherwise)."""
        load_fitting(self.model, state_dict)

    @torch.inference_mode()
    def act(
        self, observations: Sequence[Any], rnn_states: torch.Tensor, deterministic: bool = False
    ) -> tuple[list, torch.Tensor]:
        """Actions for a list of B raw env observations, one forward pass.

        rnn_states: [B, S]. Returns (B actions in env format, new states [B, S]).
        """
        rows = [observation_to_dict(obs, self.observation_space) for obs in observations]
        batch = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
        actions, new_states = self._forward(batch, rnn_states, deterministic)
        return actions_to_env(actions, self.action_space), new_states

    @torch.inference_mode()
    def predict(
        self, observation: Any, state: np.ndarray | None = None, deterministic: bool = False
    ) -> tuple[Any, np.ndarray | None]:
        """Action(s) for one observation or a batch (leading axis), and the next state.

        The batch is recognised by shape: an observation shaped like the observation space is
        one, one more leading axis makes a batch. `state` is the state this method returned
        last time ([S] or [B, S]); None starts fresh. Returns (action, state): a single action
        in env format, or for a batch an array of them (a list for Tuple spaces); the state is
        None for policies without a recurrent core.
        """
        batched, batch = self._as_batch(observation)
        size = len(next(iter(batch.values())))
        rnn_states = self._as_states(state, size, batched)
        actions, new_states = self._forward(batch, rnn_states, deterministic)
        env_actions = actions_to_env(actions, self.action_space)
        out_state = new_states.cpu().numpy() if self.rnn_state_size else None
        if not batched:
            return env_actions[0], None if out_state is None else out_state[0]
        if isinstance(self.action_space, gym.spaces.Tuple):
            return env_actions, out_state
        return np.stack([np.asarray(a) for a in env_actions]), out_state

    # --- helpers --------------------------------------------------------------------------------
    def _forward(
        self, batch: Mapping[str, np.ndarray], rnn_states: torch.Tensor, deterministic: bool
    ) -> tuple[np.ndarray, torch.Tensor]:
        obs = {key: torch.as_tensor(value, device=self.device) for key, value in batch.items()}
        out = self.model.act(obs, rnn_states.to(self.device), deterministic=deterministic)
        return out.actions.cpu().numpy(), out.new_rnn_states

    def _as_batch(self, observation: Any) -> tuple[bool, dict[str, np.ndarray]]:
        """(is it a batch, {key: [B, ...]}) in the dtypes the network expects."""
        space = self.observation_space
        if isinstance(space, gym.spaces.Dict):
            first = sorted(space.spaces)[0]
            batched = _is_batch(np.asarray(observation[first]), space.spaces[first], first)
            if not batched:
                return False, _add_batch_axis(observation_to_dict(observation, space))
            return True, {
                key: observation_array(observation[key], sub, key)
                for key, sub in sorted(space.spaces.items())
            }
        array = np.asarray(observation)
        if not _is_batch(array, space, "observation"):
            return False, _add_batch_axis(observation_to_dict(array, space))
        return True, {"obs": observation_array(array, space)}

    def _as_states(self, state: np.ndarray | None, size: int, batched: bool) -> torch.Tensor:
        if state is None or self.rnn_state_size == 0:
            return self.initial_state(size)
        states = torch.as_tensor(np.asarray(state, dtype=np.float32))
        if not batched:
            states = states.unsqueeze(0)
        if tuple(states.shape) != (size, self.rnn_state_size):
            raise ValueError(
                f"state has shape {tuple(np.shape(state))}; expected "
                f"{(size, self.rnn_state_size) if batched else (self.rnn_state_size,)}"
                " (the state predict returned, or None)"
            )
        return states


def _is_batch(array: np.ndarray, box: gym.Space, name: str) -> bool:
    assert box.shape is not None  # supported observation parts (Box, discrete) have shapes
    shape = tuple(box.shape)
    if array.shape == shape:
        return False
    if array.ndim == len(shape) + 1 and array.shape[1:] == shape:
        return True
    raise ValueError(
        f"{name} has shape {array.shape}; expected {shape} (one observation) or "
        f"(batch, {', '.join(map(str, shape))}) (a batch)"
    )


def _add_batch_axis(row: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key: value[None] for key, value in row.items()}
