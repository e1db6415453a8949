"""Unit tests for sampleforge.envs.pettingzoo_env: the PettingZoo parallel-API adapter."""

from __future__ import annotations

import pickle
import textwrap
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pettingzoo = pytest.importorskip(
    "pettingzoo", reason="needs pettingzoo (pip install 'sampleforge[pettingzoo]')"
)

from sampleforge.envs.multi_agent import MultiAgentEnv  # noqa: E402
from sampleforge.envs.pettingzoo_env import (  # noqa: E402
    PettingZooParallelEnv,
    make_pettingzoo_env,
    pettingzoo_env_name,
    pettingzoo_module,
    placeholder_observation,
)
from sampleforge.envs.registry import EnvContext  # noqa: E402
from sampleforge.spaces import check_supported  # noqa: E402

KAZ_MODULE = "pettingzoo.butterfly.knights_archers_zombies_v11"
KAZ_ID = "butterfly/knights_archers_zombies_v11"
RPS = "pettingzoo.classic.rps_v2"
HAS_REGISTRY = hasattr(pettingzoo, "make")  # PettingZoo's own env registry (1.27+)

# PettingZoo 1.27 warns on importing its env modules directly; that path is tested on purpose.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The old environment creation API:DeprecationWarning"
)

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)
ACT_SPACE = gym.spaces.Discrete(3)


class FakeParallelEnv:
    """Three agents; 'b' terminates after 2 steps, 'a' and 'c' are truncated after 5.

    It records every actions dict it receives, and (like a careless env) keeps reporting a
    reward and an observation for 'b' after it has left, which the adapter must ignore.
    """

    metadata = {"name": "fake_v0"}
    possible_agents = ["a", "b", "c"]
    lifetimes = {"a": 5, "b": 2, "c": 5}

    def __init__(self, spaces: dict[str, tuple[gym.Space, gym.Space]] | None = None) -> None:
        self.spaces = spaces or {agent: (OBS_SPACE, ACT_SPACE) for agent in self.possible_agents}
        self.agents: list[str] = []
        self.received: list[dict[str, Any]] = []
        self.seeds: list[int | None] = []
        self.closed = False
        self._t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return self.spaces[agent][0]

    def action_space(self, agent: str) -> gym.Space:
        return self.spaces[agent][1]

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.possible_agents.index(agent) + 1, self._t], dtype=np.float32)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self.seeds.append(seed)
        self._t = 0
        self.agents = list(self.possible_agents)
        return {agent: self._obs(agent) for agent in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.received.append(dict(actions))
        assert set(actions) == set(self.agents), "every live agent must get an action"
        self._t += 1
        everyone = self.possible_agents
        observations = {agent: self._obs(agent) for agent in everyone}
        rewards = {agent: 1.0 for agent in everyone}
        terminations = {agent: agent == "b" and self._t >= 2 for agent in everyone}
        truncations = {agent: agent != "b" and self._t >= 5 for agent in everyone}
        infos = {agent: {"t": self._t} for agent in everyone}
        self.agents = [a for a in self.agents if self._t < self.lifetimes[a]]
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------- fake env


def test_departed_seat_gets_placeholder_zero_reward_and_no_action() -> None:
    fake = FakeParallelEnv()
    env = PettingZooParallelEnv(fake)
    assert isinstance(env, MultiAgentEnv)
    assert env.num_agents == 3 and env.agent_names == ("a", "b", "c")
    assert env.observation_space == OBS_SPACE and env.action_space == ACT_SPACE

    observations, infos = env.reset(seed=7)
    assert [obs[0] for obs in observations] == [1.0, 2.0, 3.0]
    assert len(infos) == 3

    for t in range(1, 6):
        observations, rewards, terminated, truncated, infos = env.step([0, 1, 2])
        b_done = t >= 2
        assert rewards.dtype == np.float32 and rewards.shape == (3,)
        assert terminated.dtype == bool and truncated.dtype == bool
        assert terminated.tolist() == [False, b_done, False]
        assert truncated.tolist() == [t >= 5, False, t >= 5]
        # 'b' is rewarded on the step it leaves, never after, whatever the env reports.
        assert rewards.tolist() == [1.0, 1.0 if t <= 2 else 0.0, 1.0]
        if t > 2:
            np.testing.assert_array_equal(observations[1], np.zeros(2, dtype=np.float32))
            assert infos[1] == {}
        else:
            assert observations[1][1] == t  # the real (final) observation on its last step
        assert observations[0][1] == t and infos[0] == {"t": t}
        assert all(OBS_SPACE.contains(obs) for obs in observations)

    assert [set(actions) for actions in fake.received] == [{"a", "b", "c"}] * 2 + [{"a", "c"}] * 3
    assert all(actions["a"] == 0 and actions["c"] == 2 for actions in fake.received)
    assert not env.alive.any()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step([0, 0, 0])


def test_reset_starts_a_fresh_episode_and_passes_the_seed() -> None:
    fake = FakeParallelEnv()
    env = PettingZooParallelEnv(fake)
    env.reset(seed=3)
    for _ in range(5):
        env.step([0, 0, 0])
    env.reset(seed=None)
    assert fake.seeds == [3, None]
    assert env.alive.tolist() == [True, True, True]
    _, _, terminated, truncated, _ = env.step([0, 0, 0])
    assert not terminated.any() and not truncated.any()
    assert set(fake.received[-1]) == {"a", "b", "c"}


def test_step_before_reset_and_wrong_action_count_are_errors() -> None:
    env = PettingZooParallelEnv(FakeParallelEnv())
    with pytest.raises(RuntimeError, match="call reset"):
        env.step([0, 0, 0])
    env.reset()
    with pytest.raises(ValueError, match="expects 3 actions"):
        env.step([0, 0])


def test_agent_leaving_without_flags_counts_as_terminated() -> None:
    class SilentLeave(FakeParallelEnv):
        def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
            obs, rewards, terms, truncs, infos = super().step(actions)
            return obs, rewards, {}, {}, infos

    env = PettingZooParallelEnv(SilentLeave())
    env.reset()
    env.step([0, 0, 0])
    _, _, terminated, truncated, _ = env.step([0, 0, 0])
    assert terminated.tolist() == [False, True, False] and not truncated.any()


def test_unknown_agent_is_a_clear_error() -> None:
    class Spawner(FakeParallelEnv):
        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            result = super().reset(seed=seed)
            self.agents.append("zombie_7")
            return result

    env = PettingZooParallelEnv(Spawner())
    with pytest.raises(ValueError, match="zombie_7.*not in possible_agents"):
        env.reset()


def test_mismatched_spaces_name_env_agents_and_spaces() -> None:
    other = gym.spaces.Box(-1.0, 1.0, shape=(5,), dtype=np.float32)
    spaces = {"a": (OBS_SPACE, ACT_SPACE), "b": (other, ACT_SPACE), "c": (OBS_SPACE, ACT_SPACE)}
    with pytest.raises(ValueError) as raised:
        PettingZooParallelEnv(FakeParallelEnv(spaces))
    message = str(raised.value)
    assert "fake_v0" in message and "\n" not in message
    assert "['a', 'c'] have observation Box(-10.0, 10.0, (2,), float32)" in message
    assert "['b'] have observation Box(-1.0, 1.0, (5,), float32)" in message
    assert "share one observation and one action space" in message


def test_mismatched_action_spaces_are_rejected_too() -> None:
    spaces = {agent: (OBS_SPACE, ACT_SPACE) for agent in "ac"}
    spaces["b"] = (OBS_SPACE, gym.spaces.Discrete(4))
    with pytest.raises(ValueError, match="Discrete\\(4\\)"):
        PettingZooParallelEnv(FakeParallelEnv(spaces))


def test_close_closes_the_wrapped_env() -> None:
    fake = FakeParallelEnv()
    PettingZooParallelEnv(fake).close()
    assert fake.closed


# --------------------------------------------------------------------------- placeholders


def test_placeholders_lie_in_their_space() -> None:
    spaces = [
        gym.spaces.Box(1.0, 2.0, shape=(3,), dtype=np.float32),  # zero is outside: use low
        gym.spaces.Box(0, 255, shape=(4, 4), dtype=np.uint8),
        gym.spaces.Discrete(4, start=2),
        gym.spaces.MultiDiscrete([3, 4], start=[1, -1]),
        gym.spaces.MultiBinary(5),
        gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, shape=(2,)))),
    ]
    for space in spaces:
        value = placeholder_observation(space)
        assert space.contains(value), space
        # Deterministic: the same value every time, not a random sample.
        assert str(placeholder_observation(space)) == str(value)
    np.testing.assert_array_equal(placeholder_observation(spaces[0]), np.ones(3))
    assert placeholder_observation(spaces[2]) == 2


def test_action_mask_placeholder_allows_every_action() -> None:
    space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(0, 1, shape=(3, 3, 2), dtype=np.int8),
            "action_mask": gym.spaces.Box(0, 1, shape=(9,), dtype=np.int8),
        }
    )
    value = placeholder_observation(space)
    assert space.contains(value)
    np.testing.assert_array_equal(value["action_mask"], np.ones(9, dtype=np.int8))
    assert not value["observation"].any()


def test_unsupported_placeholder_space_is_rejected_at_construction() -> None:
    spaces = {agent: (gym.spaces.Text(5), ACT_SPACE) for agent in "abc"}
    with pytest.raises(TypeError, match="no placeholder observation"):
        PettingZooParallelEnv(FakeParallelEnv(spaces))


# --------------------------------------------------------------------------- factory, naming


def test_env_names_round_trip() -> None:
    assert pettingzoo_env_name(RPS) == "pettingzoo:pettingzoo.classic.rps_v2"
    assert pettingzoo_module(pettingzoo_env_name(RPS)) == RPS
    assert pettingzoo_module("CartPole-v1") is None
    assert pettingzoo_module("pettingzoo:") is None


def test_factory_builds_rps_and_is_picklable() -> None:
    factory = pickle.loads(pickle.dumps(partial(make_pettingzoo_env, RPS, max_cycles=3)))
    env = factory(EnvContext())
    assert env.name == "pettingzoo:pettingzoo.classic.rps_v2"
    assert env.num_agents == 2
    observations, _ = env.reset(seed=0)
    assert all(env.observation_space.contains(obs) for obs in observations)
    steps = 0
    while env.alive.any():
        _, rewards, _, truncated, _ = env.step([0, 1])  # rock vs paper
        steps += 1
        assert rewards.tolist() == [-1.0, 1.0]
    assert steps == 3 and truncated.all()
    env.close()


def test_factory_error_for_a_missing_package_says_what_to_install() -> None:
    with pytest.raises(ImportError, match="'no_such_pkg_xyz' is not installed; pip install"):
        make_pettingzoo_env("no_such_pkg_xyz.some_env_v0", EnvContext())


def test_factory_error_for_a_missing_env_module_names_it() -> None:
    with pytest.raises(ImportError, match="pettingzoo.classic.no_such_game_v9"):
        make_pettingzoo_env("pettingzoo.classic.no_such_game_v9", EnvContext())


def test_factory_error_for_a_missing_dependency_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sf_fake_family_env_v0.py").write_text(
        textwrap.dedent(
            """
            import sf_dependency_that_is_absent

            def parallel_env():
                raise AssertionError("unreachable")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="needs 'sf_dependency_that_is_absent'"):
        make_pettingzoo_env("sf_fake_family_env_v0", EnvContext())


def test_factory_rejects_a_module_without_parallel_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sf_aec_only_env_v0.py").write_text("def env():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="has no parallel_env"):
        make_pettingzoo_env("sf_aec_only_env_v0", EnvContext())


# --------------------------------------------------------------------------- a real env


@pytest.fixture
def kaz() -> Iterator[PettingZooParallelEnv]:
    pytest.importorskip(
        "pygame", reason="KAZ needs pygame-ce (pip install 'pettingzoo[butterfly]')"
    )
    env = make_pettingzoo_env(KAZ_ID if HAS_REGISTRY else KAZ_MODULE, EnvContext(), max_cycles=300)
    yield env
    env.close()


@pytest.mark.skipif(not HAS_REGISTRY, reason="this PettingZoo has no env registry")
def test_registry_id_and_module_path_build_the_same_env() -> None:
    pytest.importorskip(
        "pygame", reason="KAZ needs pygame-ce (pip install 'pettingzoo[butterfly]')"
    )
    by_id = make_pettingzoo_env(KAZ_ID, EnvContext())
    by_module = make_pettingzoo_env(KAZ_MODULE, EnvContext())
    assert by_id.name == "pettingzoo:butterfly/knights_archers_zombies_v11"
    assert by_id.agent_names == by_module.agent_names
    assert by_id.observation_space == by_module.observation_space
    assert by_id.action_space == by_module.action_space
    by_id.close()
    by_module.close()


@pytest.mark.skipif(not HAS_REGISTRY, reason="this PettingZoo has no env registry")
def test_unknown_registry_id_is_pettingzoos_error() -> None:
    with pytest.raises(Exception, match="butterfly/no_such_game"):
        make_pettingzoo_env("butterfly/no_such_game_v1", EnvContext())


def test_kaz_satisfies_the_multi_agent_contract(kaz: PettingZooParallelEnv) -> None:
    check_supported(kaz.observation_space, kaz.action_space, kaz.name)
    rng = np.random.default_rng(0)
    for episode in range(3):
        observations, infos = kaz.reset(seed=episode)
        assert len(observations) == len(infos) == kaz.num_agents == 4
        done = np.zeros(kaz.num_agents, dtype=bool)
        for _ in range(400):
            actions = [int(a) for a in rng.integers(0, 6, size=kaz.num_agents)]
            observations, rewards, terminated, truncated, infos = kaz.step(actions)
            assert len(observations) == len(infos) == 4
            assert all(kaz.observation_space.contains(obs) for obs in observations)
            assert rewards.shape == (4,) and rewards.dtype == np.float32
            now_done = terminated | truncated
            assert now_done[done].all(), "a finished seat must stay done"
            assert not rewards[done].any(), "a finished seat must get reward 0"
            done = now_done
            if done.all():
                break
        assert done.all(), "episode did not end within max_cycles"


def test_kaz_seeding_reproduces_observations(kaz: PettingZooParallelEnv) -> None:
    def rollout(seed: int) -> list[np.ndarray]:
        kaz.reset(seed=seed)
        frames = []
        for t in range(40):
            observations, *_ = kaz.step([t % 6] * kaz.num_agents)
            frames.append(np.stack(observations))
        return frames

    first, again, other = rollout(11), rollout(11), rollout(12)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not all(np.array_equal(x, y) for x, y in zip(first, other))
