"""Unit tests for sampleforge.envs.registry: naming, building, seeding, episode statistics."""

from __future__ import annotations

import pickle
from importlib.util import find_spec
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs import (
    EnvContext,
    EnvInfo,
    EpisodeStatistics,
    UnknownEnvError,
    env_info,
    env_seed,
    make_env,
    register_env,
    registered_envs,
    registry,
    resolve_env,
)
from sampleforge.spaces import UnsupportedSpaceError


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test must not leak into the next one."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_INFO_CACHE", {})


class ScriptedEnv(gym.Env):
    """Gives rewards from a fixed list, then terminates; remembers its build context."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, rewards: list[float], context: EnvContext | None = None) -> None:
        self.rewards = rewards
        self.context = context
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = self.rewards[self._t]
        self._t += 1
        terminated = self._t == len(self.rewards)
        return np.zeros(2, dtype=np.float32), reward, terminated, False, {}


def scripted_factory(context: EnvContext) -> gym.Env:
    return ScriptedEnv([1.0, 2.0, 3.5], context)


def test_gymnasium_id_resolves_with_its_reward_threshold() -> None:
    spec = resolve_env("CartPole-v1")
    assert spec.reward_threshold == 475.0
    assert spec.frameskip == 1
    info = env_info("CartPole-v1")
    assert isinstance(info, EnvInfo)
    assert info.action_space == gym.spaces.Discrete(2)
    assert info.observation_space.shape == (4,)
    assert info.reward_threshold == 475.0


def test_custom_env_is_built_with_its_context() -> None:
    register_env("scripted", scripted_factory, frameskip=2, reward_threshold=6.0)
    context = EnvContext(worker_index=2, env_index=3, seed=7)
    env = make_env("scripted", context)
    assert env.unwrapped.context == context
    assert isinstance(env, EpisodeStatistics)
    assert "scripted" in registered_envs()
    spec = resolve_env("scripted")
    assert (spec.frameskip, spec.reward_threshold) == (2, 6.0)


def test_registered_name_shadows_gymnasium_id() -> None:
    register_env("CartPole-v1", scripted_factory)
    assert isinstance(make_env("CartPole-v1").unwrapped, ScriptedEnv)


def test_duplicate_registration_is_an_error_unless_overwrite() -> None:
    register_env("dup", scripted_factory)
    with pytest.raises(ValueError, match="'dup' is already registered"):
        register_env("dup", scripted_factory)
    register_env("dup", scripted_factory, description="second", overwrite=True)
    assert resolve_env("dup").description == "second"


def test_overwrite_invalidates_cached_env_info() -> None:
    register_env("swap", scripted_factory)
    assert env_info("swap").action_space == gym.spaces.Discrete(2)
    register_env("swap", lambda context: gym.make("MountainCarContinuous-v0"), overwrite=True)
    assert isinstance(env_info("swap").action_space, gym.spaces.Box)


def test_env_info_builds_one_env_per_name() -> None:
    calls: list[EnvContext] = []

    def counting_factory(context: EnvContext) -> gym.Env:
        calls.append(context)
        return scripted_factory(context)

    register_env("counted", counting_factory)
    assert env_info("counted") is env_info("counted")
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("bad", "good"), [("CartPol-v1", "CartPole-v1"), ("atari_breakot", "atari_breakout")]
)
def test_misspelled_name_suggests_the_right_one(bad: str, good: str) -> None:
    with pytest.raises(UnknownEnvError) as caught:
        resolve_env(bad)
    message = str(caught.value)
    assert "\n" not in message
    assert repr(bad) in message
    assert repr(good) in message
    assert isinstance(caught.value, ValueError)


def test_hopeless_name_still_gives_a_one_line_hint() -> None:
    with pytest.raises(UnknownEnvError, match="registered_envs"):
        make_env("zzzzqqqq-nothing")


def test_episode_statistics_appear_exactly_at_episode_end() -> None:
    register_env("scripted", scripted_factory)
    env = make_env("scripted")
    for _ in range(2):  # the second episode must start counting from zero again
        env.reset(seed=0)
        infos = [env.step(0)[4] for _ in range(3)]
        assert ["episode" in info for info in infos] == [False, False, True]
        episode = infos[-1]["episode"]
        assert episode == {"r": 6.5, "l": 3}
        assert type(episode["r"]) is float and type(episode["l"]) is int


def test_episode_statistics_report_truncation_too() -> None:
    register_env("capped", lambda context: gym.wrappers.TimeLimit(ScriptedEnv([1.0] * 10), 4))
    env = make_env("capped")
    env.reset()
    steps = [env.step(0) for _ in range(4)]
    assert steps[-1][3] is True
    assert steps[-1][4]["episode"] == {"r": 4.0, "l": 4}
    assert all("episode" not in step[4] for step in steps[:-1])


def test_factory_statistics_are_not_doubled() -> None:
    register_env("prewrapped", lambda context: EpisodeStatistics(ScriptedEnv([1.0])))
    env = make_env("prewrapped")
    assert not isinstance(env.env, EpisodeStatistics)
    env.reset()
    assert env.step(0)[4]["episode"] == {"r": 1.0, "l": 1}


def test_env_seed_is_distinct_per_worker_and_env_and_reproducible() -> None:
    assert env_seed(EnvContext()) is None
    seeds = {
        env_seed(EnvContext(worker_index=w, env_index=e, seed=42))
        for w in range(8)
        for e in range(8)
    }
    assert len(seeds) == 64
    assert env_seed(EnvContext(1, 2, seed=42)) == env_seed(EnvContext(1, 2, seed=42))
    assert env_seed(EnvContext(1, 2, seed=42)) != env_seed(EnvContext(1, 2, seed=43))


def test_make_env_seeds_the_action_space_from_the_context() -> None:
    context = EnvContext(worker_index=1, env_index=0, seed=5)
    a = make_env("CartPole-v1", context)
    b = make_env("CartPole-v1", context)
    assert [a.action_space.sample() for _ in range(20)] == [
        b.action_space.sample() for _ in range(20)
    ]


def test_invalid_registrations_and_contexts_are_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        register_env("", scripted_factory)
    with pytest.raises(TypeError, match="callable"):
        register_env("x", "not a factory")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frameskip"):
        register_env("x", scripted_factory, frameskip=0)
    with pytest.raises(ValueError, match="worker_index"):
        EnvContext(worker_index=-1)


def test_factory_must_return_a_gymnasium_env() -> None:
    register_env("broken", lambda context: object())  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="expected a gymnasium.Env"):
        make_env("broken")


def test_env_info_rejects_unsupported_spaces() -> None:
    class TextEnv(ScriptedEnv):
        observation_space = gym.spaces.Text(5)

    register_env("text", lambda context: TextEnv([1.0]))
    with pytest.raises(UnsupportedSpaceError, match="env 'text'.*Text.*supported: Box"):
        env_info("text")


@pytest.mark.parametrize(
    "name",
    [
        "CartPole-v1",
        pytest.param(
            "atari_breakout",
            marks=pytest.mark.skipif(find_spec("ale_py") is None, reason="needs ale-py"),
        ),
    ],
)
def test_specs_pickle_for_worker_processes(name: str) -> None:
    spec = pickle.loads(pickle.dumps(resolve_env(name)))
    assert (spec.name, spec.frameskip) == (name, resolve_env(name).frameskip)
    spec.factory(EnvContext()).close()


def test_episode_statistics_keeps_no_history_of_past_episodes():
    import gymnasium as gym

    from sampleforge.envs.registry import EpisodeStatistics

    env = EpisodeStatistics(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(5):  # five episodes
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            done = terminated or truncated
        assert set(info["episode"]) == {"r", "l"} and info["episode"]["l"] > 0
        env.reset()
    assert len(env.return_queue) == len(env.length_queue) == 1  # gymnasium keeps 100 by default
