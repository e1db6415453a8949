"""StepUndo: after a step it tells whether any parameter or optimizer statistic is non-finite,
whatever the kind of non-finite value and wherever it is, and puts back the state before it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sampleforge.learners.step_undo import StepUndo


def _stepped_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()  # Adam now has moments to check and to restore
    return model, optimizer


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    for state in optimizer.state.values():
        tensors += [v.clone() for v in state.values() if torch.is_tensor(v)]
    return tensors


def _second_moment(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    return next(iter(optimizer.state.values()))["exp_avg_sq"]


def test_finite_values_of_any_size_are_finite():
    model, optimizer = _stepped_model()
    undo = StepUndo()
    undo.save(model, optimizer)
    with torch.no_grad():
        next(model.parameters()).mul_(1e30)  # large, with both signs, and still finite
    assert undo.finite()


@pytest.mark.parametrize(
    "poison",
    [
        pytest.param(lambda m, o: m[0].weight.data.__setitem__((3, 1), float("nan")), id="nan"),
        pytest.param(lambda m, o: m[2].bias.data.__setitem__(1, float("inf")), id="+inf"),
        pytest.param(lambda m, o: m[0].bias.data.__setitem__(0, -float("inf")), id="-inf"),
        pytest.param(
            lambda m, o: (
                m[0].bias.data.__setitem__(0, float("inf")),
                m[0].bias.data.__setitem__(1, -float("inf")),
            ),
            id="+inf and -inf in one tensor",
        ),
        pytest.param(
            lambda m, o: _second_moment(o).view(-1).__setitem__(5, float("inf")),
            id="an Adam moment",
        ),
    ],
)
def test_any_non_finite_value_is_found_and_the_saved_state_put_back(poison):
    model, optimizer = _stepped_model()
    undo = StepUndo()
    undo.save(model, optimizer)
    saved = _state(model, optimizer)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    poison(model, optimizer)
    assert not undo.finite()
    undo.restore()
    assert all(torch.equal(a, b) for a, b in zip(saved, _state(model, optimizer), strict=True))
    assert undo.finite()
