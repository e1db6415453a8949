"""Data-parallel learners on 2 ranks over gloo on loopback (distributed/learner_group.py):
one averaged step equals one process's step on the concatenated batch, and whole learners stay
identical bit for bit however different their data."""

from __future__ import annotations

import dataclasses
import hashlib

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from sampleforge.config import make_config
from sampleforge.distributed.learner_group import LearnerGroup
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.batcher import Dataset
from sampleforge.models.normalizer import RunningMeanStd
from sampleforge.testing.local_ranks import run_ranks

CPU = torch.device("cpu")


class TwoGroupNet(nn.Module):
    """A normaliser and two layers, trained with two parameter groups."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = RunningMeanStd((4,))
        self.body = nn.Linear(4, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.norm(x))))


def _batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(64, 4, generator=g) * 3 + 1, torch.randn(64, 2, generator=g))
        for _ in range(steps)
    ]


def _train(net: TwoGroupNet, batches, group: LearnerGroup | None, part: slice) -> dict:
    optimizer = torch.optim.Adam(
        [{"params": net.body.parameters(), "lr": 1e-2}, {"params": net.head.parameters()}],
        lr=3e-3,
    )
    for x, y in batches:
        x, y = x[part], y[part]
        net.norm.update(x)
        loss = (net(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if group is not None:
            assert group.average_gradients(net.parameters(), bool(torch.isfinite(loss)))
        optimizer.step()
    return {k: v.clone() for k, v in net.state_dict().items()}


def _averaged_half(rank, steps: int) -> dict:
    torch.manual_seed(0)
    net = TwoGroupNet()
    group = LearnerGroup(rank, 0, CPU, 60.0)  # each check its own policy id: a fresh group
    group.share_running_statistics(net)
    half = slice(32 * rank.rank, 32 * (rank.rank + 1))
    state = _train(net, _batches(steps), group, half)
    group.close()
    return state


def _every_check(rank) -> dict:
    """What each test below looks at, computed in one start of the two ranks (a start costs
    seconds: fresh interpreters import torch)."""
    half = _equivalence_cfg(True)
    return {
        "two_group_net": _averaged_half(rank, 3),
        "own_data": _learner_on_own_data(rank, 3),
        "vtrace_half": _learner_half(rank, half, 2),
        "gae_half": _learner_half(rank, dataclasses.replace(half, with_vtrace=False), 3),
        "straggler": _learner_half(rank, half, 4, follows=rank.rank == 1),
    }


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    return run_ranks(_every_check, 2)


def test_an_averaged_step_equals_one_process_on_the_concatenated_batch(ranks):
    torch.manual_seed(0)
    single = _train(TwoGroupNet(), _batches(3), None, slice(None))
    for state in (r["two_group_net"] for r in ranks):
        for name, value in single.items():
            if value.is_floating_point():
                torch.testing.assert_close(state[name], value, rtol=0, atol=1e-6, msg=name)
            else:
                assert torch.equal(state[name], value), name  # the normaliser's count


def _cfg(**overrides):
    return make_config(
        env="CartPole-v1",
        **{
            "rollout": 8,
            "batch_size": 32,
            "num_batches_per_epoch": 2,
            "num_epochs": 2,
            "normalize_obs": True,
            "normalize_returns": True,
            **overrides,
        },
    )


def _dataset(seed: int, cfg) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    T, B = cfg.rollout + 1, cfg.dataset_size // cfg.rollout
    return Dataset(
        obs={"obs": torch.randn(T, B, 4, generator=g) * (1 + seed)},
        actions=torch.randint(0, 2, (T, B), generator=g),
        rnn_states=torch.zeros(T, B, 0),
        rewards=torch.randn(T, B, generator=g),
        dones=(torch.rand(T, B, generator=g) < 0.1).float(),
        valids=torch.ones(T, B),
        log_probs=torch.full((T, B), -0.69),
        values=torch.zeros(T, B),
        policy_versions=torch.zeros(T, B, dtype=torch.int64),
        policy_ids=torch.zeros(T, B, dtype=torch.int32),
    )


def _digest(state) -> str:
    h = hashlib.sha256()
    for value in state.values() if isinstance(state, dict) else state:
        if torch.is_tensor(value):
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            h.update(_digest(value).encode())
    return h.hexdigest()


def _learner_on_own_data(rank, datasets: int, on_gpu: bool = False) -> tuple[str, str, int]:
    cfg = _cfg()
    device = torch.device("cuda", rank.local_rank) if on_gpu else CPU
    torch.manual_seed(rank.rank)  # different initial weights: the group's broadcast aligns them
    space, actions = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    learner = ActorCriticLearner(cfg, space, actions, device)
    group = LearnerGroup(rank, 1, device, 60.0)  # NCCL on a GPU
    state = group.broadcast_state(learner.state_dict() if rank.is_main else None)
    learner.load_state_dict(state)
    learner.data_parallel = group
    group.share_running_statistics(learner.model)
    for i in range(datasets):
        learner.train(_dataset(100 * rank.rank + i, cfg).to(device), lambda: None)
    model, optimizer = learner.model.state_dict(), learner.optimizer.state_dict()["state"]
    group.close()
    return (
        _digest(model),
        _digest({str(k): v for k, v in optimizer.items()}),
        learner.policy_version,
    )


def test_learners_on_different_data_stay_identical_bit_for_bit(ranks):
    (model0, opt0, v0), (model1, opt1, v1) = (r["own_data"] for r in ranks)
    assert v0 == v1 == 3 * 2 * 2  # 3 datasets x 2 epochs x 2 minibatches
    assert model0 == model1
    assert opt0 == opt1


@pytest.mark.gpu
def test_nccl_learners_on_the_machine_s_gpus_stay_identical_bit_for_bit():
    """One rank per GPU, two at most (NCCL wants a GPU of its own per rank): the NCCL group,
    its all-reduce and the gloo control group beside it. On a one-GPU machine a single rank
    still runs the NCCL path whole."""
    world = min(2, torch.cuda.device_count())
    results = run_ranks(_learner_on_own_data, world, 3, True)
    assert all(version == 3 * 2 * 2 for _, _, version in results)
    assert len({(model, optimizer) for model, optimizer, _ in results}) == 1


def _single_process_learner(cfg, data: Dataset) -> dict:
    torch.manual_seed(0)
    space, actions = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    learner = ActorCriticLearner(cfg, space, actions, CPU)
    learner.train(data, lambda: None)
    return learner.model.state_dict()


def _learner_half(rank, cfg, policy_id: int, follows: bool = False) -> dict:
    """Rank r trains on dataset r; a rank that `follows` (a straggler under sync_fraction)
    goes through the same steps on other data with weight 0."""
    torch.manual_seed(0)
    space, actions = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    learner = ActorCriticLearner(cfg, space, actions, CPU)
    group = LearnerGroup(rank, policy_id, CPU, 60.0)
    learner.data_parallel = group
    group.share_running_statistics(learner.model)
    group.weight = 0.0 if follows else 1.0
    learner.train(_dataset(7 if follows else rank.rank, cfg), lambda: None)
    group.close()
    return {k: v.clone() for k, v in learner.model.state_dict().items()}


def _equivalence_cfg(with_vtrace: bool):
    # One minibatch of the whole dataset, advantages unnormalised (a minibatch's mean and std
    # are not the mean of two halves'), a large Adam eps (Adam's first step is about sign(g):
    # rounding in a near-zero gradient would otherwise be magnified to the learning rate).
    return _cfg(
        num_epochs=1,
        num_batches_per_epoch=1,
        batch_size=64,
        normalize_advantages=False,
        adam_eps=1e-3,
        with_vtrace=with_vtrace,
    )


@pytest.mark.parametrize("with_vtrace", [True, False])
def test_a_data_parallel_learner_step_equals_one_process_on_both_datasets(ranks, with_vtrace):
    half = _equivalence_cfg(with_vtrace)
    whole = dataclasses.replace(half, batch_size=128)
    both = [_dataset(0, half), _dataset(1, half)]
    joined = Dataset(
        obs={"obs": torch.cat([d.obs["obs"] for d in both], dim=1)},
        **{
            f.name: torch.cat([getattr(d, f.name) for d in both], dim=1)
            for f in dataclasses.fields(Dataset)
            if f.name != "obs"
        },
    )
    single = _single_process_learner(whole, joined)
    for state in (r["vtrace_half" if with_vtrace else "gae_half"] for r in ranks):
        for name, value in single.items():
            if value.is_floating_point():
                torch.testing.assert_close(state[name], value, rtol=0, atol=1e-6, msg=name)


def test_a_straggler_takes_part_without_counting(ranks):
    """sync_fraction: rank 1 follows with weight 0, so both ranks end as one process that
    trained on rank 0's dataset alone (its normalisers included)."""
    cfg = _equivalence_cfg(True)
    single = _single_process_learner(cfg, _dataset(0, cfg))
    for state in (r["straggler"] for r in ranks):
        for name, value in single.items():
            if value.is_floating_point():
                torch.testing.assert_close(state[name], value, rtol=0, atol=1e-6, msg=name)
            else:
                assert torch.equal(state[name], value), name
