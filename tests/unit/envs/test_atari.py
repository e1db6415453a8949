"""Unit tests for sampleforge.envs.atari: DeepMind preprocessing semantics on real ROMs."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs import EnvContext, env_info, make_env, registered_envs, resolve_env
from sampleforge.envs.atari import ATARI_GAMES, FireReset, make_atari_env

needs_ale = pytest.mark.skipif(
    find_spec("ale_py") is None or find_spec("cv2") is None,
    reason="needs the atari extra: pip install 'sampleforge[atari]'",
)


class RawRewardTap:
    """Records what the emulator itself returns, underneath every wrapper."""

    def __init__(self, env: gym.Env) -> None:
        self.frames = 0
        self.total_reward = 0.0
        raw = env.unwrapped
        inner_step = raw.step

        def step(action: Any) -> Any:
            result = inner_step(action)
            self.frames += 1
            self.total_reward += float(result[1])
            return result

        # An instance attribute shadows AtariEnv.step, so every wrapper's call lands here.
        raw.step = step


def random_actions(env: gym.Env, seed: int) -> Any:
    env.action_space.seed(seed)
    while True:
        yield env.action_space.sample()


def step_until_terminal(env: gym.Env, actions: Any, limit: int = 5000) -> tuple[Any, ...]:
    for _ in range(limit):
        result = env.step(next(actions))
        if result[2] or result[3]:
            return result
    raise AssertionError(f"no episode end within {limit} steps")


def test_importing_envs_does_not_import_ale_py() -> None:
    code = (
        "import sys; import sampleforge.envs as e; "
        "assert 'ale_py' not in sys.modules and 'cv2' not in sys.modules; "
        "assert 'atari_breakout' in e.registered_envs()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_ale_py_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ale_py", None)  # makes `import ale_py` fail
    with pytest.raises(ImportError, match=r"pip install 'sampleforge\[atari\]'"):
        make_env("atari_breakout")


@needs_ale
def test_all_games_are_registered_with_frameskip_4() -> None:
    assert set(ATARI_GAMES) <= set(registered_envs())
    for name, game_id in ATARI_GAMES.items():
        assert resolve_env(name).frameskip == 4
        assert resolve_env(game_id).name == game_id  # the Gymnasium id exists (ale_py loaded)


@needs_ale
def test_breakout_observations_and_random_steps() -> None:
    info = env_info("atari_breakout")
    assert info.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert info.action_space == gym.spaces.Discrete(4)
    assert info.frameskip == 4
    assert info.frame_stacked_keys == ("obs",)  # FrameStackObservation, found in the wrappers

    env = make_env("atari_breakout", EnvContext(seed=3))
    obs, _ = env.reset(seed=3)
    assert obs in env.observation_space
    actions = random_actions(env, seed=3)
    for _ in range(50):
        obs, reward, _, _, _ = env.step(next(actions))
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert reward in (-1.0, 0.0, 1.0)
    env.close()


@needs_ale
def test_same_seed_gives_the_same_game() -> None:
    def trajectory() -> list[np.ndarray]:
        env = make_env("atari_breakout")
        observations = [env.reset(seed=11)[0]]
        actions = random_actions(env, seed=11)
        observations += [env.step(next(actions))[0] for _ in range(30)]
        return observations

    assert all(np.array_equal(a, b) for a, b in zip(trajectory(), trajectory()))


@needs_ale
def test_life_loss_ends_agent_episode_but_not_the_game() -> None:
    env = make_env("atari_breakout")
    _, info = env.reset(seed=0)
    start_lives = info["lives"]
    _, _, terminated, truncated, info = step_until_terminal(env, random_actions(env, 0))
    assert terminated and not truncated
    assert 0 < info["lives"] < start_lives
    assert "episode" not in info
    frame_at_loss = info["episode_frame_number"]

    _, reset_info = env.reset()
    # Same game: lives kept, the emulator clock moved on instead of starting over.
    assert reset_info["lives"] == info["lives"]
    assert reset_info["episode_frame_number"] > frame_at_loss
    env.close()


@needs_ale
def test_episode_statistics_report_the_unclipped_game_at_game_over() -> None:
    env = make_env("atari_breakout")
    tap = RawRewardTap(env)
    env.reset(seed=1)
    actions = random_actions(env, 1)
    agent_terminations = 0
    while True:
        *_, truncated, info = step_until_terminal(env, actions)
        agent_terminations += 1
        if info["lives"] == 0 or truncated:
            break
        assert "episode" not in info  # a life loss is not the end of the real episode
        env.reset()

    assert agent_terminations == 5  # one per Breakout life
    assert info["episode"] == {"r": tap.total_reward, "l": tap.frames}
    assert info["episode"]["l"] == info["episode_frame_number"]
    env.close()


@needs_ale
def test_rewards_are_clipped_for_the_agent_only() -> None:
    # Space Invaders pays 5-30 points per alien, so clipping visibly changes the sum.
    env = make_env("atari_spaceinvaders")
    tap = RawRewardTap(env)
    env.reset(seed=4)
    actions = random_actions(env, 4)
    agent_rewards = []
    for _ in range(300):
        _, reward, terminated, truncated, _ = env.step(next(actions))
        agent_rewards.append(reward)
        if terminated or truncated:
            env.reset()
    assert set(agent_rewards) <= {-1.0, 0.0, 1.0}
    assert 0 < sum(agent_rewards) < tap.total_reward


@needs_ale
def test_fire_reset_only_for_games_with_fire() -> None:
    def has_fire_reset(env: gym.Env) -> bool:
        while isinstance(env, gym.Wrapper):
            if isinstance(env, FireReset):
                return True
            env = env.env
        return False

    assert has_fire_reset(make_env("atari_breakout"))
    assert not has_fire_reset(make_env("atari_mspacman"))


@needs_ale
def test_evaluation_mode_plays_the_whole_game_as_one_episode() -> None:
    env = make_atari_env("BreakoutNoFrameskip-v4", EnvContext(), episodic_life=False)
    env.reset(seed=2)
    _, _, terminated, _, info = step_until_terminal(env, random_actions(env, 2))
    assert terminated and info["lives"] == 0 and "episode" in info
