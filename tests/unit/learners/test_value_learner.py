"""Unit tests for the ValueLearner (learners/value_learner.py), on CartPole-sized networks and
hand-made replay batches with a stand-in stager: every value-based algorithm trains, the TD loss
falls on a fixed batch, the target network follows by a hard copy or Polyak averaging, PER
priorities reach the sampler, non-finite steps are skipped (and too many in a row stop the run),
FQF's fraction loss trains only the proposal, the learner's state round-trips exactly, and with
`learner_bootstrap_thread` every update is the serial learner's."""

from __future__ import annotations

import copy
import dataclasses
import functools
import io
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.buffers.replay import ReplayBatch
from sampleforge.config import Config, make_config
from sampleforge.learners.optimization import NonFiniteTrainingError
from sampleforge.learners.value_learner import ValueLearner
from sampleforge.models.factory import make_q_policy
from sampleforge.testing.exact_state import exactly_equal as same
from sampleforge.testing.replay_fakes import FakeStager

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
B = 16  # batch_size must be a multiple of CartPole's rollout (16)
CPU = torch.device("cpu")
VALUE_BASED = ("dqn", "rainbow", "qrdqn", "iqn", "fqf", "mdqn")
SMALL: dict[str, Any] = dict(
    mlp_hidden_sizes=(16,), num_atoms=11, num_quantiles=8, num_fractions=4, batch_size=B
)


@functools.lru_cache(maxsize=None)
def _config(algorithm: str, items: tuple[tuple[str, Any], ...]) -> Config:
    return make_config(env="CartPole-v1", algorithm=algorithm, **SMALL, **dict(items))


def config(algorithm: str = "dqn", **overrides: Any) -> Config:
    return _config(algorithm, tuple(sorted(overrides.items())))


def make_learner(cfg: Config, seed: int = 0, frameskip: int = 1) -> ValueLearner:
    torch.manual_seed(seed)
    model = make_q_policy(cfg, OBS, ACTIONS)
    return ValueLearner(cfg, model, FakeStager(), CPU, frameskip)  # type: ignore[arg-type]


def batch(seed: int = 0, returns: float | None = None, weight: float = 1.0) -> ReplayBatch:
    rng = np.random.default_rng(seed)
    return ReplayBatch(
        obs={"obs": rng.normal(size=(B, 4)).astype(np.float32)},
        actions=rng.integers(0, 2, size=(B, 1)),
        returns=(rng.normal(size=B) if returns is None else np.full(B, returns)).astype(np.float32),
        discounts=np.where(np.arange(B) % 4 == 0, 0.0, 0.99).astype(np.float32),
        next_obs={"obs": rng.normal(size=(B, 4)).astype(np.float32)},
        indices=np.arange(B, dtype=np.int64) + 100 * seed,
        weights=np.full(B, weight, np.float32),
    )


def params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _noop() -> None:
    pass


@pytest.mark.parametrize("algorithm", VALUE_BASED)
def test_every_algorithm_trains_and_publishes_each_step(algorithm):
    learner = make_learner(config(algorithm))
    before = params(learner.network)
    published = []
    stats = learner.train([batch(0), batch(1), batch(2)], lambda: published.append(1))
    assert learner.policy_version == 3 and learner.updates == 3 and len(published) == 3
    assert learner.stager.current_version == 3
    assert np.isfinite(stats["losses/td"]) and np.isfinite(stats["learner/grad_norm"])
    after = params(learner.network)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any(k.startswith("encoder.") for k in changed), changed
    assert any(k.startswith("head.") for k in changed), changed


def test_td_loss_falls_on_a_fixed_batch():
    # The target network is held still: a regression to fixed targets.
    learner = make_learner(config("dqn", learning_rate=1e-2, target_update_period=10_000))
    fixed = batch(0)
    losses = [learner.train([fixed], _noop)["losses/td"] for _ in range(80)]
    assert losses[-1] < 0.2 * losses[0], losses[::10]


def test_hard_target_update_copies_exactly_every_period():
    learner = make_learner(config("dqn", target_update_period=3, target_tau=1.0))
    initial = params(learner.target)
    for step in (1, 2):
        learner.train([batch(step)], _noop)
        assert same(params(learner.target), initial), step
        assert not same(params(learner.network), initial)
    learner.train([batch(3)], _noop)
    copied = params(learner.target)
    assert same(copied, params(learner.network))
    learner.train([batch(4)], _noop)
    assert same(params(learner.target), copied)
    assert not same(params(learner.network), copied)


def test_polyak_target_update_moves_the_target_halfway():
    learner = make_learner(config("dqn", target_update_period=1, target_tau=0.5))
    old_target = params(learner.target)
    learner.train([batch(0)], _noop)
    online = params(learner.network)
    for name, value in params(learner.target).items():
        torch.testing.assert_close(value, (old_target[name] + online[name]) / 2, msg=name)
        assert not torch.equal(value, online[name]) or torch.equal(old_target[name], value)


@pytest.mark.parametrize("prioritized", [True, False])
def test_priorities_reach_the_sampler_only_with_prioritized_replay(prioritized):
    cfg = config("dqn", prioritized_replay=prioritized, priority_beta=0.4)
    learner = make_learner(cfg, frameskip=2)
    sampler = learner.stager.sampler
    batches = [batch(0), batch(1)]
    learner.train(batches, _noop)
    assert sampler.betas == [pytest.approx(0.4)]  # nothing trained on yet: the start
    if not prioritized:
        assert sampler.priority_updates == []
        return
    assert len(sampler.priority_updates) == 2
    for (indices, priorities), sent in zip(sampler.priority_updates, batches):
        np.testing.assert_array_equal(indices, sent.indices)
        assert priorities.shape == (B,) and priorities.dtype == np.float64
        assert np.all(np.isfinite(priorities)) and np.all(priorities >= 0)
        assert priorities.max() > 0
    # Beta anneals linearly to 1 over the run's env steps.
    learner.stager.inserted_steps = cfg.train_for_env_steps // 4  # half the run, frameskip 2
    learner.train([batch(2)], _noop)
    assert sampler.betas[-1] == pytest.approx(0.4 + 0.5 * 0.6)


def test_a_non_finite_update_is_skipped_and_too_many_in_a_row_stop_training():
    learner = make_learner(config("dqn", max_consecutive_skipped_updates=3))
    nan = batch(0, returns=float("nan"))
    before = params(learner.network)
    optimizer_before = learner.optimizer.state_dict()
    stats = learner.train([nan], _noop)
    assert stats["health/non_finite_updates"] == 1.0
    assert same(params(learner.network), before)
    assert same(learner.optimizer.state_dict(), optimizer_before)
    assert learner.policy_version == 0 and learner.updates == 0
    assert learner.skipped_updates == 1

    learner.train([nan], _noop)
    learner.train([batch(1)], _noop)  # a good update in between resets the run of skips
    learner.train([nan, nan], _noop)
    assert learner.skipped_updates == 4 and learner.policy_version == 1
    with pytest.raises(NonFiniteTrainingError, match="3 updates in a row"):
        learner.train([nan], _noop)


@pytest.mark.parametrize("algorithm", VALUE_BASED)
@pytest.mark.parametrize("field", ["returns", "obs"])
def test_every_head_skips_a_non_finite_batch(algorithm, field):
    learner = make_learner(config(algorithm))
    good = batch(0)
    if field == "obs":
        bad = dataclasses.replace(good, obs={"obs": np.full_like(good.obs["obs"], np.inf)})
    else:
        bad = dataclasses.replace(good, **{field: np.full(B, np.nan, np.float32)})
    before = params(learner.network)
    stats = learner.train([bad], _noop)
    assert stats["health/non_finite_updates"] == 1.0
    assert learner.skipped_updates == 1 and learner.policy_version == 0
    assert same(params(learner.network), before)
    assert learner.stager.sampler.priority_updates == []


@pytest.mark.parametrize("thread", [False, True], ids=["inline", "bootstrap_thread"])
@pytest.mark.parametrize("algorithm", ["dqn", "fqf"])
def test_a_step_that_overflows_the_weights_is_undone(algorithm, thread):
    """Parameters and every optimizer's state go back as they were (FQF: its fraction
    proposal's RMSprop too, which stepped in the same update); with the bootstrap thread,
    from the copy it took beside the backward pass."""
    learner = make_learner(config(algorithm, fraction_lr=1e-3, learner_bootstrap_thread=thread))
    learner.train([batch(0)], _noop)  # Adam (and RMSprop) have state now
    optimizers = [o for o in (learner.optimizer, learner.fraction_optimizer) if o is not None]
    assert len(optimizers) == (2 if algorithm == "fqf" else 1)
    before = params(learner.network)
    states_before = [copy.deepcopy(o.state_dict()["state"]) for o in optimizers]
    learner.set_hyperparameters({"learning_rate": float("inf")})  # as PBT could set it
    stats = learner.train([batch(1)], _noop)
    assert stats["health/non_finite_updates"] == 1.0
    assert same(params(learner.network), before)
    for optimizer, state_before in zip(optimizers, states_before):
        assert same(optimizer.state_dict()["state"], state_before)
    assert learner.policy_version == 1 and learner.skipped_updates == 1


def test_iqn_s_loss_samples_num_quantiles_fractions_online_and_target():
    # Dabney et al. 2018b: N = N' = num_quantiles for the loss, K for the Q-values of acting.
    learner = make_learner(config("iqn"))  # num_quantiles 8 (SMALL)
    k = learner.network.num_quantile_samples
    assert k != 8
    seen: dict[str, list[tuple[int, ...]]] = {"online": [], "target": []}
    for name, network in (("online", learner.network), ("target", learner.target)):
        network.head.register_forward_hook(
            lambda m, args, out, name=name: seen[name].append(tuple(args[1].shape))
        )
    learner.train([batch(0)], _noop)
    assert (B, 8) in seen["online"] and seen["target"] == [(B, 8)], seen
    assert (B, k) in seen["online"]  # Double DQN's argmax at s', by K fractions


def test_fqf_fraction_loss_trains_the_proposal_alone():
    # Zero importance weights zero the quantile loss's gradient: only the fraction loss acts.
    learner = make_learner(config("fqf", fraction_lr=1e-2))
    proposal = {id(p) for p in learner.network.fraction_head.parameters()}
    assert not proposal & {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    before = dict(learner.network.named_parameters())
    before = {k: v.detach().clone() for k, v in before.items()}
    learner.train([batch(0, weight=0.0)], _noop)
    for name, value in learner.network.named_parameters():
        moved = not torch.equal(value, before[name])
        assert moved == name.startswith("fraction_head."), name


@pytest.mark.parametrize("algorithm", ["dqn", "fqf", "rainbow"])
def test_state_dict_round_trip_resumes_exactly(algorithm):
    cfg = config(algorithm, fraction_lr=1e-3)
    learner = make_learner(cfg, seed=0, frameskip=4)
    learner.stager.inserted_steps = 25
    learner.train([batch(0), batch(1)], _noop)
    learner.train([batch(0, returns=float("nan"))], _noop)  # a skipped update is counted
    saved = io.BytesIO()  # as a checkpoint holds it (no tensor shared with the learner)
    torch.save(learner.state_dict(), saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)

    resumed = make_learner(cfg, seed=1, frameskip=4)
    assert not same(params(resumed.network), params(learner.network))
    resumed.load_state_dict(state)
    assert same(params(resumed.model), params(learner.model))
    assert same(params(resumed.target), params(learner.target))
    assert same(resumed.optimizer.state_dict(), learner.optimizer.state_dict())
    if algorithm == "fqf":
        assert same(
            resumed.fraction_optimizer.state_dict(), learner.fraction_optimizer.state_dict()
        )
    for name in ("policy_version", "updates", "skipped_updates", "env_steps"):
        assert getattr(resumed, name) == getattr(learner, name), name
    assert resumed.stager.current_version == learner.policy_version
    assert resumed.env_steps == 100

    # Both continue alike, step for step.
    for one in (learner, resumed):
        torch.manual_seed(7)
        one.train([batch(2), batch(3)], _noop)
    assert same(params(resumed.model), params(learner.model))
    assert same(params(resumed.target), params(learner.target))


def test_the_published_model_carries_the_env_steps_trained_on():
    learner = make_learner(config("dqn"), frameskip=4)
    learner.stager.inserted_steps = 123
    seen = []
    learner.train([batch(0)], lambda: seen.append(int(learner.model.trained_env_steps)))
    assert seen == [learner.env_steps] == [492]
    assert int(learner.model.state_dict()["trained_env_steps"]) == 492


# --- learner_bootstrap_thread: the passes without a gradient on a second thread ----------------

# Heads without random draws in their passes (noisy nets and sampled quantile fractions draw
# in another order on two threads), so the two learners must agree exactly.
DETERMINISTIC = {
    "dqn": {},
    "dueling_double_dqn": {"dueling": True, "double_q": True},
    "c51": {"algorithm": "rainbow", "noisy": False},
    "qrdqn": {"algorithm": "qrdqn"},
    "mdqn": {"algorithm": "mdqn"},
}


def _takes() -> list[list]:
    """Takes of 4, 1 and 4 batches; the third holds a batch with a non-finite return."""
    bad = batch(9, returns=float("nan"))
    return [[batch(i) for i in range(4)], [batch(4)], [batch(5), bad, batch(6), batch(7)]]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_the_concurrent_learner_makes_the_serial_learners_updates(name):
    settings = dict(DETERMINISTIC[name])
    algorithm = settings.pop("algorithm", "dqn")
    # A sync every 3 updates falls inside the takes: the pass for the batch after a sync must
    # wait for the new target weights.
    common = dict(target_update_period=3, prioritized_replay=True, learning_rate=1e-2)
    serial = make_learner(config(algorithm, **common, **settings))
    concurrent = make_learner(
        config(algorithm, **common, **settings, learner_bootstrap_thread=True)
    )
    for take in _takes():
        stats = [learner.train(take, _noop) for learner in (serial, concurrent)]
        assert same(stats[0], stats[1])
        assert same(params(serial.network), params(concurrent.network))
        assert same(params(serial.target), params(concurrent.target))
    assert serial.updates == concurrent.updates == 8 and serial.skipped_updates == 1
    sent = [learner.stager.sampler.priority_updates for learner in (serial, concurrent)]
    assert len(sent[0]) == 8 and same(sent[0], sent[1])


def test_each_update_steps_the_fraction_proposal_on_its_own_gradient():
    """FQF's proposal has an optimizer of its own: its gradient is cleared before every
    update as the network's is, not summed over the updates."""
    learner = make_learner(config("fqf", fraction_lr=1e-3))
    learner.train([batch(0)], _noop)
    fresh = make_learner(config("fqf", fraction_lr=1e-3), seed=1)
    fresh.load_state_dict(learner.state_dict())
    for each in (learner, fresh):
        each.train([batch(1)], _noop)
    grads = [[p.grad for p in each.network.fraction_head.parameters()] for each in (learner, fresh)]
    assert all(g is not None for g in grads[0]) and same(grads[0], grads[1])


@pytest.mark.parametrize("algorithm", VALUE_BASED)
def test_every_value_algorithm_trains_with_the_thread(algorithm):
    learner = make_learner(config(algorithm, learner_bootstrap_thread=True, target_update_period=2))
    before = params(learner.network)
    for take in _takes():
        stats = learner.train(take, _noop)
        assert np.isfinite(stats["losses/td"])
    assert learner.updates == 8 and learner.policy_version == 8
    assert not same(before, params(learner.network))
    assert all(torch.isfinite(p).all() for p in learner.network.parameters())


def test_a_resumed_learner_uses_the_adam_settings_of_its_config():
    learner = make_learner(config("dqn"))
    learner.train([batch(0)], _noop)
    resumed = make_learner(config("dqn", adam_eps=1e-3, adam_beta2=0.9), seed=1)
    resumed.load_state_dict(copy.deepcopy(learner.state_dict()))
    (group,) = resumed.optimizer.param_groups
    assert group["eps"] == 1e-3 and group["betas"][1] == 0.9
