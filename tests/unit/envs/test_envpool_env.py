"""EnvPool under `envpool:<task id>` names: the resolver, the one-env view, and `EnvPoolSplit`
(shapes and dtypes in the slot, true episode returns, one batch call per step, EnvPool's own
auto-reset, the fault policy)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from sampleforge.envs import registry
from sampleforge.envs.envpool_env import (
    ENVPOOL_PREFIX,
    EnvPoolFactory,
    envpool_spec,
    envpool_task,
    envpool_unavailable_reason,
    is_envpool_spec,
)
from sampleforge.envs.registry import EnvContext, UnknownEnvError, make_env
from sampleforge.envs.stepping.env_split import EnvFaultError, StepTargets

UNAVAILABLE = envpool_unavailable_reason()
needs_envpool = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))
# EnvPool's own spaces warn about float64 bounds; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered:UserWarning")

BREAKOUT = "envpool:Breakout-v5"
CARTPOLE = "envpool:CartPole-v1"


class RecordingPool:
    """Stands in for an EnvPool: forwards every call, records (kind, env ids, result copy)."""

    def __init__(self, pool: Any):
        self.pool = pool
        self.calls: list[tuple[str, np.ndarray | None, Any]] = []

    def step(self, actions: np.ndarray, env_id: np.ndarray | None = None) -> Any:
        result = self.pool.step(actions, env_id)
        self.calls.append(
            ("step", None if env_id is None else env_id.copy(), copy.deepcopy(result))
        )
        return result

    def reset(self, env_id: np.ndarray | None = None) -> Any:
        result = self.pool.reset(env_id)
        self.calls.append(
            ("reset", None if env_id is None else env_id.copy(), copy.deepcopy(result))
        )
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def _split(
    name: str, num_envs: int, seed: int | None = 0, policy: str = "restart", worker_index: int = 0
):
    from sampleforge.envs.stepping.envpool_split import EnvPoolSplit

    return EnvPoolSplit(
        env_spec=envpool_spec(name),
        worker_index=worker_index,
        first_env_index=0,
        num_envs=num_envs,
        seed=seed,
        error_policy=policy,
        num_threads=1,
    )


def _targets(split, fill: float = np.nan) -> StepTargets:
    n = split.num_rows
    space = split.observation_space
    dtype = np.uint8 if space.dtype == np.uint8 else np.float32  # the buffer's dtype rule
    return StepTargets(
        rewards=np.full(n, fill, np.float32),
        dones=np.full(n, fill, np.float32),
        valids=np.full(n, fill, np.float32),
        next_obs={"obs": np.zeros((n, *space.shape), dtype)},
    )


def _random_actions(split, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, split.action_space.n, (split.num_rows, 1))


# --- names and the resolver -----------------------------------------------------------------------
def test_envpool_task_reads_only_envpool_names():
    assert envpool_task("envpool:Breakout-v5") == "Breakout-v5"
    assert envpool_task("envpool:Hopper-v4") == "Hopper-v4"
    assert envpool_task("envpool:") is None
    assert envpool_task("atari_breakout") is None
    assert envpool_task("pettingzoo:classic/rps_v2") is None
    # Other names are not the resolver's: no envpool import, no error.
    assert envpool_spec("CartPole-v1") is None


@needs_envpool
def test_resolver_maps_atari_names_to_our_preprocessing():
    spec = envpool_spec(BREAKOUT)
    assert spec.name == BREAKOUT and is_envpool_spec(spec)
    assert spec.frameskip == 4
    options = dict(spec.factory.options)
    assert options["episodic_life"] and options["reward_clip"]
    assert (options["stack_num"], options["img_height"], options["img_width"]) == (4, 84, 84)
    assert options["noop_max"] == 30 and options["repeat_action_probability"] == 0.0
    assert pickle.loads(pickle.dumps(spec)) == spec  # specs travel to worker processes


@needs_envpool
def test_resolver_maps_other_families_without_frameskip():
    cartpole = envpool_spec(CARTPOLE)
    assert cartpole.frameskip == 1 and cartpole.reward_threshold == 475.0
    assert dict(cartpole.factory.options) == {}
    assert envpool_spec("envpool:Hopper-v4").frameskip == 1


@needs_envpool
def test_unknown_task_suggests_envpool_names():
    with pytest.raises(UnknownEnvError, match="envpool:Breakout-v5"):
        envpool_spec("envpool:Breakout-v4")


@needs_envpool
def test_env_info_describes_one_env(monkeypatch):
    monkeypatch.setattr(registry, "_INFO_CACHE", {})
    info = registry.env_info(BREAKOUT)
    assert info.observation_space.shape == (4, 84, 84)
    assert info.observation_space.dtype == np.uint8
    assert info.action_space.n == 4 and info.frameskip == 4
    assert info.frame_stacked_keys == ("obs",)  # a replay stores each of its frames once
    assert registry.env_info(CARTPOLE).observation_space.shape == (4,)
    assert registry.env_info(CARTPOLE).frame_stacked_keys == ()


# --- the one-env view -----------------------------------------------------------------------------
@needs_envpool
def test_view_continues_the_game_after_a_lost_life_and_reports_whole_games():
    env = make_env(envpool_spec(BREAKOUT), EnvContext(seed=3))
    obs, info = env.reset(seed=registry.env_seed(EnvContext(seed=3)))
    assert obs.shape == (4, 84, 84) and info["lives"] == 5
    rng = np.random.default_rng(0)
    raw_total, lives_lost, episode = 0.0, 0, None
    for _ in range(5_000):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        raw_total += info["reward"]
        assert reward == np.sign(info["reward"])  # clipped for learning, raw in info
        if "episode" in info:
            episode = info["episode"]
            break
        if terminated or truncated:
            lives_lost += 1
            lives = info["lives"]
            obs, info = env.reset()
            assert info["lives"] == lives  # the same game goes on
    env.close()
    assert episode is not None and lives_lost == 4  # 5 lives: 4 losses, then game over
    assert episode["r"] == raw_total


# --- EnvPoolSplit ---------------------------------------------------------------------------------
@needs_envpool
def test_split_writes_atari_batches_into_the_slot():
    split = _split(BREAKOUT, num_envs=3)
    out = _targets(split)
    split.reset_all(out.next_obs)
    assert out.next_obs["obs"].any()
    rng = np.random.default_rng(1)
    for _ in range(30):
        out = _targets(split)
        split.step(_random_actions(split, rng), out)
        assert out.next_obs["obs"].shape == (3, 4, 84, 84)
        assert (
            out.next_obs["obs"].dtype == np.uint8 and out.next_obs["obs"].any(axis=(1, 2, 3)).all()
        )
        assert np.isin(out.rewards, (-1.0, 0.0, 1.0)).all()
        assert np.isin(out.dones, (0.0, 1.0)).all()
        assert (out.valids == 1.0).all()
    assert (split.num_rows, len(split), split.seats) == (3, 3, 1)
    assert split.env_rows(2) == slice(2, 3)
    assert [c.env_index for c in split.contexts] == [0, 1, 2]
    split.close()


@needs_envpool
def test_split_casts_float64_mujoco_data_and_box_actions():
    from sampleforge.envs.stepping.envpool_split import EnvPoolSplit

    split = EnvPoolSplit(
        env_spec=envpool_spec("envpool:Hopper-v4"),
        worker_index=0,
        first_env_index=0,
        num_envs=2,
        seed=0,
        error_policy="fail",
    )
    out = _targets(split)
    split.reset_all(out.next_obs)
    actions = np.full((2, 3), 5.0, np.float32)  # out of bounds: clipped to [-1, 1]
    split.step(actions, out)
    assert out.next_obs["obs"].dtype == np.float32 and np.isfinite(out.next_obs["obs"]).all()
    assert out.next_obs["obs"].shape == (2, 11) and np.isfinite(out.rewards).all()
    split.close()


@needs_envpool
def test_episode_returns_are_the_sum_of_raw_rewards_over_whole_games():
    # Asterix: 50-point rewards (clipped to 1 for learning), 3 lives, short random games.
    split = _split("envpool:Asterix-v5", num_envs=4, seed=7)
    recorder = split.pool = RecordingPool(split.pool)
    out = _targets(split)
    split.reset_all(out.next_obs)
    rng = np.random.default_rng(2)
    running = np.zeros(4)
    expected: list[tuple[int, float]] = []
    reported: list[tuple[int, float, int]] = []
    life_dones = big_rewards = 0
    for _ in range(1_500):
        out = _targets(split)
        outcome = split.step(_random_actions(split, rng), out)
        reported += zip(outcome.episode_rows, outcome.episode_returns, outcome.episode_lengths)
        _, ids, (_, _, terminated, truncated, info) = next(
            c for c in recorder.calls if c[0] == "step" and len(c[1]) == 4
        )
        recorder.calls.clear()
        np.testing.assert_array_equal(out.rewards, np.sign(info["reward"]))
        big_rewards += int((np.abs(info["reward"]) > 1).sum())
        running[ids] += info["reward"]
        game_over = (terminated | truncated) & (info["terminated"].astype(bool) | truncated)
        life_dones += int(((terminated | truncated) & ~game_over).sum())
        for i in np.flatnonzero(game_over):
            expected.append((int(i), float(running[i])))
            running[i] = 0.0
        if len(expected) >= 4:
            break
    split.close()
    assert len(expected) >= 4, "too few games finished to check anything"
    assert big_rewards > 0 and life_dones > 0  # clipping and lost lives were both exercised
    assert [(row, ret) for row, ret, _ in reported] == expected
    assert all(length > 0 and length % 4 == 0 for _, _, length in reported)  # frames


@needs_envpool
def test_batch_is_stepped_in_one_call_and_ended_envs_reset_by_envpool():
    split = _split(BREAKOUT, num_envs=4, seed=11)
    recorder = split.pool = RecordingPool(split.pool)
    out = _targets(split)
    split.reset_all(out.next_obs)
    assert [kind for kind, _, _ in recorder.calls] == ["reset"]
    rng = np.random.default_rng(3)
    resets_seen = 0
    previous_partial: dict[int, int] = {}  # env -> elapsed_step after EnvPool reset it
    for _ in range(300):
        recorder.calls.clear()
        out = _targets(split)
        outcome = split.step(_random_actions(split, rng), out)
        full, *partial = recorder.calls
        assert full[0] == "step" and list(full[1]) == [0, 1, 2, 3]  # the whole batch, once
        _, _, (_, _, terminated, truncated, info) = full
        for i, elapsed in previous_partial.items():
            # The step after EnvPool's reset is a real step: the policy's action was used.
            assert info["elapsed_step"][i] == elapsed + 1
        previous_partial = {}
        ended = np.flatnonzero(terminated | truncated)
        assert sorted(set(outcome.ended_envs)) == ended.tolist()
        if ended.size:
            # One partial step for exactly the ended envs (EnvPool's auto-reset, no explicit
            # reset that would restart a game after a lost life).
            assert len(partial) == 1
            kind, ids, (obs, reward, p_term, p_trunc, p_info) = partial[0]
            assert kind == "step" and ids.tolist() == ended.tolist()
            assert not (p_term | p_trunc).any() and not reward.any()
            lost_life = ~info["terminated"][ended].astype(bool)
            np.testing.assert_array_equal(
                p_info["lives"][lost_life], info["lives"][ended][lost_life]
            )
            np.testing.assert_array_equal(out.next_obs["obs"][ended], obs)  # first obs written
            assert (out.dones[ended] == 1.0).all() and (out.valids == 1.0).all()
            previous_partial = dict(zip(ended.tolist(), p_info["elapsed_step"].tolist()))
            resets_seen += int(ended.size)
        else:
            assert partial == []
    split.close()
    assert resets_seen > 0, "no episode ended: nothing was checked"


@needs_envpool
def test_seeds_follow_the_contexts():
    def game_states(seed, worker_index):
        split = _split(BREAKOUT, num_envs=4, seed=seed, worker_index=worker_index)
        recorder = split.pool = RecordingPool(split.pool)
        out = _targets(split)
        split.reset_all(out.next_obs)
        for _ in range(20):
            split.step(np.zeros((4, 1), np.int64), out)
        split.close()
        return recorder.calls[-1][2][-1]["ram"]  # the emulator's memory, per env

    same = game_states(5, 0)
    np.testing.assert_array_equal(same, game_states(5, 0))
    # Another worker's envs get other seeds, hence other no-op starts and other games.
    assert not np.array_equal(same, game_states(5, 1))


class _NanRewardPool(RecordingPool):
    """Env 1's reward turns non-finite on the 3rd batch step."""

    def __init__(self, pool: Any):
        super().__init__(pool)
        self.batch_steps = 0

    def step(self, actions, env_id=None):
        obs, reward, terminated, truncated, info = super().step(actions, env_id)
        if len(env_id) == 2:
            self.batch_steps += 1
            if self.batch_steps == 3:
                reward = reward.copy()
                reward[1] = np.inf
        return obs, reward, terminated, truncated, info


class _RaisingPool(RecordingPool):
    def step(self, actions, env_id=None):
        raise RuntimeError("pool exploded")


@needs_envpool
def test_non_finite_reward_restarts_its_env_or_fails():
    split = _split(CARTPOLE, num_envs=2, policy="restart")
    split.pool = _NanRewardPool(split.pool)
    split.reset_all(_targets(split).next_obs)
    outcomes = []
    for _ in range(3):
        out = _targets(split)
        outcomes.append((split.step(np.zeros((2, 1), np.int64), out), out))
    outcome, out = outcomes[-1]
    assert out.rewards.tolist() == [1.0, 0.0] and out.valids.tolist() == [1.0, 0.0]
    assert out.dones[1] == 1.0 and outcome.ended_envs == [1]
    assert len(outcome.faults) == 1 and "non-finite reward" in outcome.faults[0]
    assert split.pool.calls[-1][0] == "reset" and split.pool.calls[-1][1].tolist() == [1]
    split.close()

    failing = _split(CARTPOLE, num_envs=2, policy="fail")
    failing.pool = _NanRewardPool(failing.pool)
    failing.reset_all(_targets(failing).next_obs)
    with pytest.raises(EnvFaultError, match="non-finite reward"):
        for _ in range(3):
            failing.step(np.zeros((2, 1), np.int64), _targets(failing))
    failing.close()


@needs_envpool
def test_pool_exception_rebuilds_the_batch_or_fails():
    split = _split(CARTPOLE, num_envs=2, policy="restart")
    split.reset_all(_targets(split).next_obs)
    split.pool = _RaisingPool(split.pool)
    out = _targets(split)
    outcome = split.step(np.zeros((2, 1), np.int64), out)
    assert not isinstance(split.pool, _RaisingPool)  # a new pool
    assert out.valids.tolist() == [0.0, 0.0] and out.dones.tolist() == [1.0, 1.0]
    assert out.rewards.tolist() == [0.0, 0.0] and np.isfinite(out.next_obs["obs"]).all()
    assert len(outcome.faults) == 2 and "pool exploded" in outcome.faults[0]
    assert sorted(outcome.ended_envs) == [0, 1]
    split.step(np.zeros((2, 1), np.int64), _targets(split))  # and it steps again
    split.close()

    failing = _split(CARTPOLE, num_envs=2, policy="fail")
    failing.reset_all(_targets(failing).next_obs)
    failing.pool = _RaisingPool(failing.pool)
    with pytest.raises(EnvFaultError, match="pool exploded"):
        failing.step(np.zeros((2, 1), np.int64), _targets(failing))
    failing.close()


@needs_envpool
def test_split_refuses_specs_that_are_not_envpool():
    from sampleforge.envs.stepping.envpool_split import EnvPoolSplit

    spec = registry.EnvSpec("not_envpool", lambda ctx: None)
    with pytest.raises(TypeError, match="EnvSplit"):
        EnvPoolSplit(
            env_spec=spec,
            worker_index=0,
            first_env_index=0,
            num_envs=1,
            seed=0,
            error_policy="fail",
        )
    assert isinstance(envpool_spec(CARTPOLE).factory, EnvPoolFactory)
    assert ENVPOOL_PREFIX == "envpool:"


@needs_envpool
def test_truncated_envs_show_their_final_observation_then_envpool_resets_them():
    # Pendulum's episodes end only by its 200-step time limit.
    split = _split("envpool:Pendulum-v1", num_envs=2, seed=0)
    recorder = split.pool = RecordingPool(split.pool)
    out = _targets(split)
    split.reset_all(out.next_obs)
    actions = np.zeros((2, 1), np.float32)
    episodes = []
    for t in range(1, 203):
        recorder.calls.clear()
        out = _targets(split)
        outcome = split.step(actions, out)
        episodes += outcome.episode_lengths
        (_, _, (obs, reward, terminated, truncated, info)), *partial = recorder.calls
        assert partial == []  # a truncation never triggers an immediate reset
        if t < 200:
            assert (out.dones == 0.0).all() and (out.valids == 1.0).all()
        elif t == 200:
            assert truncated.all() and not terminated.any()
            # No done flag: the learner bootstraps from the true final observation.
            assert (out.dones == 0.0).all() and (out.valids == 1.0).all()
            np.testing.assert_array_equal(out.next_obs["obs"], obs.astype(np.float32))
            assert episodes == [200, 200] and outcome.ended_envs == []
        elif t == 201:
            # EnvPool reset them in this batch step (their actions ignored): not trained on.
            assert (info["elapsed_step"] == 0).all()
            assert out.dones.tolist() == [1.0, 1.0] and out.valids.tolist() == [0.0, 0.0]
            assert out.rewards.tolist() == [0.0, 0.0] and sorted(outcome.ended_envs) == [0, 1]
        else:
            assert (out.valids == 1.0).all() and (info["elapsed_step"] == 1).all()
    split.close()
