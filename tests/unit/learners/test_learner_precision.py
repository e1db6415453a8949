"""`learner_precision`: with bfloat16 every learner family with an encoder computes its
encoder's layers in bfloat16 while its weights, optimizer state and what it publishes stay
float32; float32 (the default) computes in float32 throughout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from sampleforge.buffers.replay import ReplayBatch
from sampleforge.config import make_config
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.pqn_learner import PQNLearner
from sampleforge.learners.probe_data import random_dataset
from sampleforge.learners.value_learner import ValueLearner
from sampleforge.models.factory import make_q_policy
from sampleforge.testing.replay_fakes import FakeStager

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
CPU = torch.device("cpu")
SMALL = dict(rollout=4, batch_size=8, num_batches_per_epoch=2, mlp_hidden_sizes=(16,))


def _replay_batch(size: int) -> ReplayBatch:
    rng = np.random.default_rng(0)
    return ReplayBatch(
        obs={"obs": rng.normal(size=(size, 4)).astype(np.float32)},
        actions=rng.integers(0, 2, size=(size, 1)),
        returns=rng.normal(size=size).astype(np.float32),
        discounts=np.full(size, 0.99, np.float32),
        next_obs={"obs": rng.normal(size=(size, 4)).astype(np.float32)},
        indices=np.arange(size, dtype=np.int64),
        weights=np.ones(size, np.float32),
    )


def _actor_critic(precision: str) -> tuple[nn.Module, Any, Callable[[], None]]:
    cfg = make_config(learner_precision=precision, **SMALL)
    learner = ActorCriticLearner(cfg, OBS, ACT, CPU)
    data = random_dataset(cfg, OBS, ACT, rnn_state_size=0)
    return learner.model, learner.optimizer, lambda: learner.train(data, lambda: None)


def _pqn(precision: str) -> tuple[nn.Module, Any, Callable[[], None]]:
    cfg = make_config(algorithm="pqn", learner_precision=precision, **SMALL)
    learner = PQNLearner(cfg, make_q_policy(cfg, OBS, ACT), CPU)
    data = random_dataset(cfg, OBS, ACT, rnn_state_size=0)
    return learner.network, learner.optimizer, lambda: learner.train(data, lambda: None)


def _value(precision: str) -> tuple[nn.Module, Any, Callable[[], None]]:
    cfg = make_config(env="CartPole-v1", algorithm="dqn", learner_precision=precision, **SMALL)
    learner = ValueLearner(cfg, make_q_policy(cfg, OBS, ACT), FakeStager(), CPU, 1)  # type: ignore[arg-type]
    return (
        learner.network,
        learner.optimizer,
        lambda: learner.train([_replay_batch(8)], lambda: None),
    )


LEARNERS = {"actor_critic": _actor_critic, "pqn": _pqn, "value_based": _value}


def _linear_output_dtypes(model: nn.Module, train: Callable[[], None]) -> set[torch.dtype]:
    """The dtypes the model's encoder layers produced during one train call."""
    seen: set[torch.dtype] = set()
    encoders = [m for name, m in model.named_modules() if name.endswith("encoder")]
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for encoder in encoders
        for layer in encoder.modules()
        if isinstance(layer, nn.Linear)
    ]
    try:
        train()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("family", list(LEARNERS))
@pytest.mark.parametrize(
    ("precision", "computed"), [("bfloat16", torch.bfloat16), ("float32", torch.float32)]
)
def test_the_encoders_compute_in_the_precision_asked(family, precision, computed):
    model, optimizer, train = LEARNERS[family](precision)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert _linear_output_dtypes(model, train) == {computed}
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it trained
    assert {v.dtype for v in after.values() if v.is_floating_point()} == {torch.float32}
    moments = [t for s in optimizer.state.values() for t in s.values() if t.is_floating_point()]
    assert moments and {t.dtype for t in moments} == {torch.float32}
