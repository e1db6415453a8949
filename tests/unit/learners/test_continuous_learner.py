"""Unit tests for the ContinuousLearner (learners/continuous_learner.py), on Pendulum-sized
networks and hand-made replay batches with a stand-in stager: every algorithm trains and
publishes each step, the critic loss falls on a fixed batch, TD3 and CrossQ update the actor
every `policy_delay` critic updates, target critics follow by Polyak averaging (and CrossQ has
none), SAC's temperature learns, actions from the replay reach the critics in [-1, 1],
non-finite batches are skipped, and the learner's state round-trips exactly."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.buffers.replay import ReplayBatch
from sampleforge.config import Config, make_config
from sampleforge.learners.continuous_learner import ContinuousLearner
from sampleforge.models.factory import make_continuous_policy
from sampleforge.testing.exact_state import exactly_equal
from sampleforge.testing.replay_fakes import FakeStager

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([4.0, 1.0], np.float32))
B = 32
CPU = torch.device("cpu")
ALGORITHMS = ("ddpg", "td3", "sac", "crossq")
SMALL: dict[str, Any] = dict(
    mlp_hidden_sizes=(16, 16), critic_hidden_sizes=(16, 16), batch_size=B, batch_renorm_warmup=2
)


def config(algorithm: str = "sac", **overrides: Any) -> Config:
    return make_config(env="Pendulum-v1", algorithm=algorithm, **{**SMALL, **overrides})


def make_learner(cfg: Config, seed: int = 0) -> ContinuousLearner:
    torch.manual_seed(seed)
    model = make_continuous_policy(cfg, OBS, ACTIONS)
    return ContinuousLearner(cfg, model, FakeStager(), CPU, frameskip=1)  # type: ignore[arg-type]


def batch(seed: int = 0, returns: float | None = None) -> ReplayBatch:
    rng = np.random.default_rng(seed)
    low, high = ACTIONS.low, ACTIONS.high
    return ReplayBatch(
        obs={"obs": rng.normal(size=(B, 3)).astype(np.float32)},
        actions=rng.uniform(low, high, size=(B, 2)).astype(np.float32),
        returns=(rng.normal(size=B) if returns is None else np.full(B, returns)).astype(np.float32),
        discounts=np.where(np.arange(B) % 4 == 0, 0.0, 0.99).astype(np.float32),
        next_obs={"obs": rng.normal(size=(B, 3)).astype(np.float32)},
        indices=np.arange(B, dtype=np.int64),
        weights=np.ones(B, np.float32),
    )


def params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The learned weights (batch renormalisation's statistics move on every forward pass)."""
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def changed(before: dict, module: torch.nn.Module) -> bool:
    after = params(module)
    return any(not torch.equal(before[k], after[k]) for k in before)


def _noop() -> None:
    pass


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_trains_and_publishes_each_step(algorithm):
    learner = make_learner(config(algorithm, policy_delay=1))
    actor, critics = params(learner.model.actor), params(learner.critics)
    published = []
    stats = learner.train([batch(0), batch(1), batch(2)], lambda: published.append(1))
    assert learner.policy_version == 3 and learner.updates == 3 and len(published) == 3
    assert learner.stager.current_version == 3
    assert np.isfinite(stats["losses/critic"]) and np.isfinite(stats["losses/actor"])
    assert changed(actor, learner.model.actor) and changed(critics, learner.critics)
    assert learner.critics.num_critics == (1 if algorithm == "ddpg" else 2)


def test_the_critic_loss_falls_on_a_fixed_batch():
    learner = make_learner(config("td3", learning_rate=1e-2, target_tau=1e-6))
    fixed = batch(0)
    losses = [learner.train([fixed], _noop)["losses/critic"] for _ in range(60)]
    assert losses[-1] < 0.2 * losses[0], losses[::10]


@pytest.mark.parametrize("algorithm, delay", [("td3", 2), ("crossq", 3)])
def test_the_actor_learns_every_policy_delay_critic_updates(algorithm, delay):
    learner = make_learner(config(algorithm))
    assert learner.cfg.policy_delay == delay
    for update in range(1, 2 * delay + 1):
        actor = params(learner.model.actor)
        stats = learner.train([batch(update)], _noop)
        assert changed(actor, learner.model.actor) == (update % delay == 0), update
        assert ("losses/actor" in stats) == (update % delay == 0)


def test_target_critics_follow_by_polyak_averaging_and_crossq_has_none():
    learner = make_learner(config("sac", target_tau=0.25))
    assert learner.target_critics is not None and learner.target_actor is None
    target = [p.detach().clone() for p in learner.target_critics.parameters()]
    learner.train([batch(0)], _noop)
    for old, new, online in zip(
        target, learner.target_critics.parameters(), learner.critics.parameters()
    ):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online)
    crossq = make_learner(config("crossq"))
    assert crossq.target_critics is None and crossq.target_actor is None
    td3 = make_learner(config("td3"))
    assert td3.target_actor is not None


def test_td3_s_target_critics_move_with_its_target_actor_every_policy_delay_updates():
    # Fujimoto et al. 2018, algorithm 1: both target networks follow inside the delayed block.
    learner = make_learner(config("td3"))
    assert learner.target_critics is not None and learner.target_actor is not None
    for update in range(1, 5):
        critics, actor = params(learner.target_critics), params(learner.target_actor)
        learner.train([batch(update)], _noop)
        assert changed(critics, learner.target_critics) == (update % 2 == 0), update
        assert changed(actor, learner.target_actor) == (update % 2 == 0), update


def _renorm_passes(module: torch.nn.Module) -> list[int]:
    """The training forward passes each batch renormalisation layer of `module` has counted."""
    return [int(b) for name, b in module.named_buffers() if name.endswith("steps")]


def test_crossq_s_statistics_move_only_in_the_passes_that_learn():
    # The actor's a' for the critics' pass (s') comes from its running statistics, as in
    # acting: only its own step's pass on s moves them. The critics' joint pass moves theirs.
    learner = make_learner(config("crossq"))
    assert learner.cfg.policy_delay == 3
    learner.train([batch(i) for i in range(6)], _noop)
    actor_passes, critic_passes = (
        _renorm_passes(m) for m in (learner.model.actor, learner.critics)
    )
    assert actor_passes and set(actor_passes) == {2}, actor_passes  # updates 3 and 6
    assert critic_passes and set(critic_passes) == {6}, critic_passes
    assert learner.model.actor.training and learner.critics.training


def test_target_networks_evaluate_by_their_running_statistics():
    learner = make_learner(config("td3", batch_renorm=True))
    assert learner.target_critics is not None and learner.target_actor is not None
    learner.train([batch(0), batch(1)], _noop)  # the targets follow at update 2
    statistics = {k: b.clone() for k, b in learner.target_critics.named_buffers()}
    learner.train([batch(2)], _noop)  # their pass at s', and no update of theirs
    assert not learner.target_critics.training and not learner.target_actor.training
    for name, after in learner.target_critics.named_buffers():
        assert torch.equal(after, statistics[name]), name


def test_the_temperature_s_rate_follows_the_critics_schedule():
    learner = make_learner(config("sac", lr_schedule="linear", train_for_env_steps=1000))
    learner.stager.inserted_steps = 250
    learner.train([batch(0)], _noop)
    assert learner.temperature_optimizer is not None
    rate = learner.temperature_optimizer.param_groups[0]["lr"]
    assert rate == learner.critic_optimizer.param_groups[0]["lr"]
    assert rate == pytest.approx(0.75 * learner.cfg.learning_rate)


def test_sac_s_temperature_learns_and_a_fixed_one_does_not():
    learner = make_learner(config("sac", learning_rate=1e-2))
    alpha = float(learner.temperature.alpha)
    stats = learner.train([batch(i) for i in range(5)], _noop)
    assert float(learner.temperature.alpha) != alpha and stats["learner/alpha"] > 0
    fixed = make_learner(config("sac", learn_temperature=False, entropy_temperature=0.1))
    fixed.train([batch(i) for i in range(5)], _noop)
    assert float(fixed.temperature.alpha) == pytest.approx(0.1)


def test_replay_actions_reach_the_critics_in_unit_range():
    learner = make_learner(config("td3"))
    seen = []
    learner.critics.register_forward_hook(lambda m, args, out: seen.append(args[0][:, 3:]))
    learner.train([batch(0)], _noop)
    replayed = seen[0]  # the first pass: the critics on (s, a) from the replay
    b = batch(0)
    expected = (b.actions - (ACTIONS.high + ACTIONS.low) / 2) / ((ACTIONS.high - ACTIONS.low) / 2)
    np.testing.assert_allclose(replayed.numpy(), expected, atol=1e-6)
    assert replayed.abs().max() <= 1.0


def test_a_non_finite_batch_is_skipped():
    learner = make_learner(config("sac"))
    before = params(learner.critics)
    stats = learner.train([batch(0, returns=float("nan"))], _noop)
    assert stats["health/non_finite_updates"] == 1.0 and learner.updates == 0
    assert not changed(before, learner.critics) and learner.skipped_updates == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_state_round_trips_exactly(algorithm):
    learner = make_learner(config(algorithm))
    learner.train([batch(0), batch(1), batch(2)], _noop)
    state = copy.deepcopy(learner.state_dict())
    other = make_learner(config(algorithm), seed=7)
    other.load_state_dict(state)
    torch.manual_seed(3)
    learner.train([batch(5)], _noop)
    torch.manual_seed(3)
    other.train([batch(5)], _noop)
    for a, b in ((learner.model, other.model), (learner.critics, other.critics)):
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            assert torch.equal(x, y), name
    assert other.updates == learner.updates == 4


def test_prioritized_replay_gets_priorities_back_and_an_annealed_beta():
    learner = make_learner(config("sac", prioritized_replay=True, priority_beta=0.4))
    learner.stager.inserted_steps = learner.cfg.train_for_env_steps // 2
    learner.train([batch(0)], _noop)
    sampler = learner.stager.sampler
    assert sampler.betas == [pytest.approx(0.7)]  # halfway from 0.4 to 1
    ((indices, priorities),) = sampler.priority_updates
    np.testing.assert_array_equal(indices, batch(0).indices)
    assert priorities.shape == (B,) and (priorities > 0).all()


def test_the_non_finite_flag_is_the_fraction_of_the_take_s_updates():
    learner = make_learner(config("sac"))
    stats = learner.train([batch(0, returns=float("nan")), batch(1)], _noop)
    assert stats["health/non_finite_updates"] == 0.5 and learner.updates == 1


# --- learner_bootstrap_thread: the bootstrap and the undo copies on a second thread ----------


def _learner_state(learner: ContinuousLearner) -> dict[str, Any]:
    modules = {
        "actor": learner.model.actor,
        "critics": learner.critics,
        "alpha": learner.temperature,
    }
    if learner.target_critics is not None:
        modules["target_critics"] = learner.target_critics
    state = {
        k: {n: t.detach().clone() for n, t in m.state_dict().items()} for k, m in modules.items()
    }
    state["optimizers"] = [
        copy.deepcopy(o.state_dict()["state"])
        for o in (learner.critic_optimizer, learner.actor_optimizer, learner.temperature_optimizer)
        if o is not None
    ]
    return state


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_concurrent_learner_makes_the_serial_learners_updates(algorithm):
    """Same weights, target critics, optimizer state, statistics and priorities after takes
    with an actor update every other step and a non-finite batch: a' is drawn on the thread in
    the order the serial learner draws it."""
    common = dict(prioritized_replay=True, policy_delay=2, learning_rate=1e-2)
    serial = make_learner(config(algorithm, **common))
    concurrent = make_learner(config(algorithm, **common, learner_bootstrap_thread=True))
    takes = [[batch(0), batch(1), batch(2)], [batch(3), batch(9, returns=float("nan")), batch(4)]]
    for i, take in enumerate(takes):
        stats = []
        for learner in (serial, concurrent):
            torch.manual_seed(100 + i)  # the draws of a' and of the actor's actions
            stats.append(learner.train(take, _noop))
        assert exactly_equal(stats[0], stats[1])
        assert exactly_equal(_learner_state(serial), _learner_state(concurrent))
    assert serial.updates == concurrent.updates == 5 and concurrent.skipped_updates == 1
    sent = [learner.stager.sampler.priority_updates for learner in (serial, concurrent)]
    assert len(sent[0]) == 5 and exactly_equal(sent[0], sent[1])


@pytest.mark.parametrize("algorithm", ["td3", "sac"])
def test_with_the_thread_an_overflowing_step_is_undone(algorithm):
    learner = make_learner(config(algorithm, policy_delay=1, learner_bootstrap_thread=True))
    learner.train([batch(0)], _noop)  # every optimizer has state now
    before = _learner_state(learner)
    learner.set_hyperparameters(
        {"learning_rate": float("inf"), "actor_learning_rate": float("inf")}
    )
    stats = learner.train([batch(1)], _noop)
    assert stats["health/non_finite_updates"] == 1.0
    after = _learner_state(learner)
    assert exactly_equal(after["critics"], before["critics"]) and exactly_equal(
        after["actor"], before["actor"]
    )
    assert exactly_equal(after["optimizers"], before["optimizers"])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_resumed_learner_uses_the_adam_settings_of_its_config(algorithm):
    learner = make_learner(config(algorithm))
    learner.train([batch(0)], _noop)
    other = make_learner(config(algorithm, adam_eps=1e-3, adam_beta2=0.9), seed=7)
    other.load_state_dict(copy.deepcopy(learner.state_dict()))
    optimizers = [other.critic_optimizer, other.actor_optimizer, other.temperature_optimizer]
    for optimizer in filter(None, optimizers):
        for group in optimizer.param_groups:
            assert group["eps"] == 1e-3 and group["betas"][1] == 0.9
