"""CriticEnsemble (models/critic_ensemble.py): K independent MLP critics in one batched pass,
equal to K separate nn.Sequential MLPs, with no gradient crossing between members, members
initialised independently as nn.Linear, and CrossQ's per-member Batch Renormalization."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from sampleforge.models.batch_renorm import BatchRenorm
from sampleforge.models.critic_ensemble import CriticEnsemble, EnsembleLinear

IN, K, B = 5, 3, 8
HIDDEN = (7, 4)


def ensemble(**kwargs: Any) -> CriticEnsemble:
    torch.manual_seed(0)
    return CriticEnsemble(IN, K, HIDDEN, **kwargs)


def linears(critics: CriticEnsemble) -> list[EnsembleLinear]:
    return [m for m in critics.modules() if isinstance(m, EnsembleLinear)]


def separate_mlps(critics: CriticEnsemble, activation: type[nn.Module]) -> list[nn.Sequential]:
    """K plain MLPs with member k's weights copied in."""
    mlps = []
    for k in range(critics.num_critics):
        layers: list[nn.Module] = []
        for layer in linears(critics):
            linear = nn.Linear(layer.in_features, layer.out_features, dtype=torch.float64)
            with torch.no_grad():
                linear.weight.copy_(layer.weight[k].T)
                linear.bias.copy_(layer.bias[k, 0])
            layers += [linear, activation()]
        mlps.append(nn.Sequential(*layers[:-1]))  # no activation after the output layer
    return mlps


@pytest.mark.parametrize(("name", "activation"), [("relu", nn.ReLU), ("tanh", nn.Tanh)])
def test_equals_separate_sequential_mlps(name: str, activation: type[nn.Module]):
    critics = ensemble(activation=name).double()
    x = torch.randn(B, IN, dtype=torch.float64)
    q = critics(x)
    assert q.shape == (K, B)
    for k, mlp in enumerate(separate_mlps(critics, activation)):
        assert torch.allclose(q[k], mlp(x).squeeze(-1), rtol=0, atol=1e-12)


def test_gradient_of_member_k_reaches_only_member_ks_slices():
    critics = ensemble()
    k = 1
    critics(torch.randn(B, IN))[k].sum().backward()
    for parameter in critics.parameters():
        assert parameter.grad is not None
        for member in range(K):
            touched = bool(parameter.grad[member].abs().sum() > 0)
            assert touched == (member == k)


def test_gradient_reaches_only_member_k_with_batch_renorm_too():
    critics = ensemble(batch_renorm=True, renorm_warmup_steps=0)
    k = 2
    critics(torch.randn(B, IN))[k].sum().backward()
    for name, parameter in critics.named_parameters():
        assert parameter.grad is not None
        for member in range(K):
            if member != k:
                assert torch.all(parameter.grad[member] == 0), name


def test_members_differ_at_init_and_are_initialised_as_nn_linear():
    critics = CriticEnsemble(64, 2, (128,))
    for layer in linears(critics):
        bound = 1 / math.sqrt(layer.in_features)
        for tensor in (layer.weight, layer.bias):
            assert not torch.equal(tensor[0], tensor[1])
            assert tensor.abs().max() <= bound
        # Uniform over the whole interval: the same bound nn.Linear's init has.
        assert layer.weight.abs().max() > 0.95 * bound
        reference = nn.Linear(layer.in_features, layer.out_features)
        assert math.isclose(layer.weight.std().item(), reference.weight.std().item(), rel_tol=0.1)
    q = critics(torch.randn(B, 64))
    assert not torch.allclose(q[0], q[1])


def test_batch_renorm_layers_sit_on_the_input_and_before_each_hidden_activation():
    critics = ensemble(batch_renorm=True)
    kinds = [type(m) for m in critics.layers]
    assert kinds == [
        BatchRenorm,
        EnsembleLinear,
        BatchRenorm,
        nn.ReLU,
        EnsembleLinear,
        BatchRenorm,
        nn.ReLU,
        EnsembleLinear,
    ]
    norms = [m for m in critics.layers if isinstance(m, BatchRenorm)]
    assert [n.num_features for n in norms] == [IN, *HIDDEN]
    assert all(n.num_members == K for n in norms)


def test_batch_renorm_train_and_eval_differ_and_shapes_are_k_by_b():
    critics = ensemble(batch_renorm=True, renorm_warmup_steps=2, renorm_momentum=0.1)
    x = torch.randn(B, IN) * 4 + 3
    train_q = critics.train()(x)
    assert train_q.shape == (K, B)
    eval_q = critics.eval()(x)
    assert eval_q.shape == (K, B)
    assert not torch.allclose(train_q, eval_q, atol=1e-3)
    # Without it, the modes agree.
    plain = ensemble()
    assert torch.equal(plain.train()(x), plain.eval()(x))


def test_bad_settings_and_inputs_are_refused():
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        CriticEnsemble(IN, K, HIDDEN, activation="gelu")
    with pytest.raises(ValueError, match="num_critics >= 1; got 0"):
        CriticEnsemble(IN, 0, HIDDEN)
    with pytest.raises(ValueError, match=r"expects input \[B, 5\]"):
        ensemble()(torch.randn(B, IN + 1))


@pytest.mark.parametrize("batch_renorm", [False, True])
def test_sac_sized_forward_and_backward_run(batch_renorm: bool):
    critics = CriticEnsemble(23, 2, (256, 256), batch_renorm=batch_renorm)
    x = torch.randn(256, 23, requires_grad=True)
    q = critics(x)
    assert q.shape == (2, 256)
    q.mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in critics.parameters())
