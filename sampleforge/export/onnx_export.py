"""Exporting a policy's acting step to ONNX, for running it without PyTorch.

Responsibility: wrap a policy's network (any `Policy` that `models/factory.py:
make_policy_model` builds) in a module whose forward is one deterministic acting step with
plain tensor inputs and outputs (`acting_step`), and write it with ``torch.onnx.export``.

An actor-critic (`PolicyStep`):

    inputs   one per observation key (``obs`` for a non-Dict space; a Dict space's keys,
             sorted), in the observation dtype (uint8 images stay uint8; discrete parts are
             zero-based integer indices, ``spaces.observation_to_dict``'s form, one-hot encoded
             inside the graph), [batch, *shape];
             ``rnn_state`` [batch, S] for a recurrent policy
    outputs  ``action``: the deterministic action [batch, A] (int64 category indices for
             discrete spaces, the raw Gaussian mean for Box, not clipped to the bounds);
             ``action_logits`` [batch, sum of category counts] (discrete) or ``action_mean``
             [batch, A] (Box); ``value`` [batch]; ``new_rnn_state`` [batch, S] (recurrent)

A Q-network of the value-based algorithms (`QPolicyStep`):

    inputs   one per observation key, as above (no recurrent state)
    outputs  ``action``: the greedy action [batch, 1] (int64), ``q_values`` [batch, A] (the
             head's expected values: for a distributional head the mean over its atoms or
             quantiles, at evenly spaced fractions for IQN; noisy layers at their mean weights)

An actor of the continuous-control algorithms (`ContinuousPolicyStep`):

    inputs   one per observation key, as above (no recurrent state)
    outputs  ``action``: the deterministic action [batch, A] (tanh of the actor's mean,
             rescaled to the env's bounds)

Observation normalisation (``normalize_obs``) is inside the graph. The batch axis is dynamic.

Must not: sample actions (a sampling graph would not match PyTorch), read checkpoints, or
convert actions to the env's format (``spaces.actions_to_env`` does that on the caller side).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

import torch
from torch import nn

from sampleforge.models.action_heads import GaussianActionHead
from sampleforge.models.actor_critic import ActorCritic
from sampleforge.models.continuous_policy import ContinuousPolicy
from sampleforge.models.policy import Policy
from sampleforge.models.q_policy import QPolicy
from sampleforge.spaces import TensorSpec

DEFAULT_OPSET = 17


def supported_opsets() -> range:
    """The opset versions torch's TorchScript-based exporter (the one used here) writes."""
    try:
        from torch.onnx import _constants as onnx_constants

        return range(
            onnx_constants.ONNX_MIN_OPSET, onnx_constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET + 1
        )
    except (ImportError, AttributeError):  # a private module: the versions known to work
        return range(DEFAULT_OPSET, DEFAULT_OPSET + 1)


class _Core(Protocol):
    """What `PolicyStep` uses of a recurrent core (``models.cores``; typed there as a Module)."""

    state_size: int

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class OnnxExport:
    """What was written: the file and the graph's input and output names, in order."""

    path: Path
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


class PolicyStep(nn.Module):
    """One deterministic acting step of `model` with positional tensor inputs (see module doc)."""

    def __init__(self, model: ActorCritic) -> None:
        super().__init__()
        self.model = model
        self.obs_specs: dict[str, TensorSpec] = dict(model.obs_specs)
        self.obs_keys = tuple(model.obs_specs)
        self.rnn_state_size = int(model.rnn_state_size)
        self.recurrent = model.rnn_state_size > 0
        self.continuous = isinstance(model.action_head, GaussianActionHead)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.obs_keys + (("rnn_state",) if self.recurrent else ())

    @property
    def output_names(self) -> tuple[str, ...]:
        params = "action_mean" if self.continuous else "action_logits"
        return ("action", params, "value") + (("new_rnn_state",) if self.recurrent else ())

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        model = self.model
        obs = model.normalize_observations(dict(zip(self.obs_keys, inputs)))
        batch = inputs[0].shape[0]
        state = inputs[-1] if self.recurrent else torch.zeros(batch, 0)
        actor_core = cast(_Core, model.actor_core)
        actor_size = actor_core.state_size
        features, new_state = actor_core.step(model.actor_encoder(obs), state[:, :actor_size])
        critic_features = features
        if model.critic_core is not None:
            assert model.critic_encoder is not None  # built together with critic_core
            critic_features, critic_state = cast(_Core, model.critic_core).step(
                model.critic_encoder(obs), state[:, actor_size:]
            )
            new_state = torch.cat([new_state, critic_state], dim=1)
        dist = model.action_head(features)
        params = dist.mean if self.continuous else torch.cat(dist.logits, dim=-1)
        outputs = (dist.mode(), params, model.value_head(critic_features).squeeze(-1))
        return outputs + ((new_state,) if self.recurrent else ())


class _FeedForwardStep(nn.Module):
    """A step whose inputs are the observation keys only (no recurrent state)."""

    def __init__(self, model: nn.Module, obs_specs: dict[str, TensorSpec]) -> None:
        super().__init__()
        self.model = model
        self.obs_specs = obs_specs
        self.obs_keys = tuple(self.obs_specs)
        self.rnn_state_size = 0

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.obs_keys


class QPolicyStep(_FeedForwardStep):
    """One greedy acting step of a `QPolicy` with positional tensor inputs (see module doc)."""

    def __init__(self, model: QPolicy) -> None:
        super().__init__(model, dict(model.network.obs_specs))

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("action", "q_values")

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q = self.model(dict(zip(self.obs_keys, inputs)))  # normalises observations itself
        return q.argmax(dim=1, keepdim=True), q


class ContinuousPolicyStep(_FeedForwardStep):
    """One deterministic acting step of a `ContinuousPolicy` with positional tensor inputs."""

    def __init__(self, model: ContinuousPolicy) -> None:
        super().__init__(model, dict(model.obs_specs))

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("action",)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(dict(zip(self.obs_keys, inputs)))  # normalises observations itself


_Step = PolicyStep | QPolicyStep | ContinuousPolicyStep

# The step of each kind of network; a family whose network is none of these cannot be exported
# until it gets an entry here.
_STEPS: dict[type[nn.Module], type[_Step]] = {
    ActorCritic: PolicyStep,
    QPolicy: QPolicyStep,
    ContinuousPolicy: ContinuousPolicyStep,
}


def acting_step(model: Policy) -> _Step:
    """The deterministic acting step of `model` as a module with positional tensor inputs."""
    for kind in type(model).__mro__:
        if kind in _STEPS:
            return _STEPS[kind](model)  # type: ignore[arg-type]  # the entry is for its kind
    raise TypeError(
        f"cannot export a {type(model).__name__}: export knows "
        f"{', '.join(k.__name__ for k in _STEPS)}"
    )


def example_inputs(model: Policy, batch_size: int = 2) -> tuple[torch.Tensor, ...]:
    """Zero inputs of the right shapes and dtypes for `acting_step(model)`."""
    return _zero_inputs(acting_step(model), batch_size)


def _zero_inputs(step: _Step, batch_size: int) -> tuple[torch.Tensor, ...]:
    inputs = [
        torch.zeros(batch_size, *spec.shape, dtype=spec.dtype) for spec in step.obs_specs.values()
    ]
    if step.rnn_state_size:
        inputs.append(torch.zeros(batch_size, step.rnn_state_size))
    return tuple(inputs)


def export_onnx(
    model: Policy, path: Path | str, *, opset_version: int = DEFAULT_OPSET
) -> OnnxExport:
    """Write `model`'s acting step to `path` as ONNX (see the module docstring for the I/O),
    whole or not at all (a temporary file, renamed). Raises TypeError for a network export has
    no step for, ValueError for an opset the exporter does not write or a folder as `path`."""
    opsets = supported_opsets()
    if opset_version not in opsets:
        raise ValueError(
            f"opset {opset_version}: the exporter writes opsets {opsets.start}-{opsets.stop - 1}"
        )
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder: give the path of the .onnx file to write")
    step = acting_step(model.cpu().eval()).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    names = step.input_names + step.output_names
    try:
        _write(step, part, names, opset_version)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, path)
    return OnnxExport(path=path, input_names=step.input_names, output_names=step.output_names)


def _write(step: _Step, path: Path, names: tuple[str, ...], opset_version: int) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript-based exporter: it needs no extra package and handles the GRU/LSTM
        # cores; torch marks it deprecated in favour of the onnxscript-based one.
        warnings.simplefilter("ignore", DeprecationWarning)
        # Its GRU/LSTM batch-size warning is about initial states that are constants: here
        # they are the rnn_state input.
        warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size")
        torch.onnx.export(
            step,
            _zero_inputs(step, 2),
            str(path),
            dynamo=False,
            input_names=list(step.input_names),
            output_names=list(step.output_names),
            dynamic_axes={name: {0: "batch"} for name in names},
            opset_version=opset_version,
        )
