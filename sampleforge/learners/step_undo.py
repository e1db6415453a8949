"""Undoing an optimizer step that left a non-finite value in the parameters or the optimizer.

A finite loss and gradient can still give non-finite parameters: a learning rate large enough
that one Adam step overflows float32, or a second moment that overflows. The learner saves the
parameters and the optimizer's state just before each step (into buffers allocated once and
reused), checks them after it, and restores them if any value is non-finite, so such weights
are never published to inference, checkpointed or trained on.

Cost: one copy of the parameters and Adam's two moments per step (a multi-tensor `_foreach`
copy) and one finiteness check over them (`_all_finite`): under 1% of a default CartPole SGD
step, about 3 ms of a Rainbow update on Atari (one CPU thread).

Must not: know about losses, datasets, processes or the config.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

_ParamState = tuple[torch.optim.Optimizer, nn.Parameter]


class StepUndo:
    """Saves a model's parameters and its optimizers' per-parameter state before a step, and
    puts them back if the step left a non-finite value."""

    def __init__(self) -> None:
        self._params: list[nn.Parameter] = []
        self._optimizers: Sequence[torch.optim.Optimizer] = ()
        self._live: list[torch.Tensor] = []  # the tensors saved: parameters, then state
        self._saved: list[torch.Tensor] = []  # their copies (reused while the layout holds)
        self._fresh: list[_ParamState] = []  # parameters without optimizer state yet
        self._scalars: list[tuple[_ParamState, str, object]] = []  # non-tensor state

    def save(
        self,
        model: nn.Module,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    ) -> None:
        """Copy `model`'s parameters and the state every optimizer keeps for them (call before
        the optimizers step; a model with two optimizers, FQF's, gives both)."""
        if isinstance(optimizers, torch.optim.Optimizer):
            optimizers = (optimizers,)
        self._params, self._optimizers = list(model.parameters()), optimizers
        self._live = [p.detach() for p in self._params]
        self._fresh, self._scalars = [], []
        for optimizer in optimizers:
            for p in self._params:
                if p not in optimizer.state and not _optimizes(optimizer, p):
                    continue
                state = optimizer.state.get(p)
                if not state:
                    self._fresh.append((optimizer, p))  # the step creates it; undo removes it
                    continue
                for key, value in state.items():
                    if torch.is_tensor(value):
                        self._live.append(value)
                    else:
                        self._scalars.append(((optimizer, p), key, value))
        if [_layout(t) for t in self._saved] != [_layout(t) for t in self._live]:
            self._saved = [torch.empty_like(t) for t in self._live]
        _copy(self._saved, self._live)

    def finite(self) -> bool:
        """Whether every parameter and every floating-point optimizer statistic is finite."""
        assert self._optimizers, "save() first"
        tensors = [p.detach() for p in self._params]
        for optimizer in self._optimizers:
            for state in optimizer.state.values():
                tensors += [
                    t for t in state.values() if torch.is_tensor(t) and t.is_floating_point()
                ]
        # One device-to-host sync per device (Adam keeps its step counts on the CPU even for
        # CUDA parameters).
        return all(_all_finite(group) for group in _by_device(tensors).values())

    def restore(self) -> None:
        """Put back what `save` copied, as if the step had never happened."""
        assert self._optimizers, "save() first"
        with torch.no_grad():
            _copy(self._live, self._saved)
        for optimizer, p in self._fresh:
            optimizer.state.pop(p, None)
        for (optimizer, p), key, value in self._scalars:
            optimizer.state[p][key] = value


def _optimizes(optimizer: torch.optim.Optimizer, p: nn.Parameter) -> bool:
    return any(p is q for group in optimizer.param_groups for q in group["params"])


def _layout(t: torch.Tensor) -> tuple:
    return t.shape, t.dtype, t.device


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every value of these tensors (all on one device) is finite.

    A sum is finite exactly when every value is (an infinity or a NaN propagates; +inf and -inf
    make a NaN), unless the values are so large that it passes 3.4e38, where the model's own
    forward pass would overflow anyway. On the CPU one vectorised sum per tensor: the fused L1
    norm there runs element by element, 12x slower (7.4 against 0.6 ms over Rainbow's 6M
    parameters and Adam moments). Elsewhere one fused kernel for all of them."""
    if tensors[0].device.type == "cpu":
        sums = torch.stack([t.sum() for t in tensors])
    else:
        sums = torch.stack(torch._foreach_norm(tensors, 1))
    return bool(sums.isfinite().all())


def _by_device(tensors: list[torch.Tensor]) -> dict[torch.device, list[torch.Tensor]]:
    """Multi-tensor kernels take the tensors of one device at a time."""
    groups: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.device, []).append(t)
    return groups


def _copy(destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """`destinations[i].copy_(sources[i])` for every i, one multi-tensor copy per device."""
    pairs: dict[torch.device, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for d, s in zip(destinations, sources, strict=True):
        group = pairs.setdefault(d.device, ([], []))
        group[0].append(d)
        group[1].append(s)
    for group_destinations, group_sources in pairs.values():
        torch._foreach_copy_(group_destinations, group_sources)
