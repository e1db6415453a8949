"""Unit tests for sampleforge.envs.mujoco: the task ids resolve, and the preset is a valid config."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

from sampleforge.config import Config, make_config
from sampleforge.config.schema import config_fields
from sampleforge.envs import EnvContext, env_info, make_env, resolve_env
from sampleforge.envs.mujoco import MUJOCO_TASKS, mujoco_preset

needs_mujoco = pytest.mark.skipif(
    find_spec("mujoco") is None,
    reason="needs the mujoco extra: pip install 'sampleforge[mujoco]'",
)


def test_preset_keys_are_config_fields() -> None:
    fields = {field.name for field in config_fields()}
    assert set(mujoco_preset()) <= fields


def test_preset_builds_a_valid_config() -> None:
    cfg = make_config(env="Hopper-v5", **mujoco_preset())
    assert isinstance(cfg, Config)
    assert cfg.with_vtrace is False and cfg.normalize_obs is True
    assert cfg.mlp_hidden_sizes == (64, 64) and cfg.activation == "tanh"
    assert cfg.batch_size % cfg.rollout == 0


def test_preset_is_a_fresh_dict_each_call() -> None:
    preset = mujoco_preset()
    preset["learning_rate"] = 1.0
    assert mujoco_preset()["learning_rate"] == 3e-4


def test_every_task_is_a_gymnasium_id_counted_in_agent_steps() -> None:
    for task in MUJOCO_TASKS:
        spec = resolve_env(task)
        assert spec.name == task
        assert spec.frameskip == 1


@needs_mujoco
def test_inverted_pendulum_resolves_and_steps() -> None:
    info = env_info("InvertedPendulum-v5")
    assert info.observation_space.shape == (4,) and info.action_space.shape == (1,)
    env = make_env("InvertedPendulum-v5", EnvContext(seed=0))
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        total, steps = 0.0, 0
        terminated = truncated = False
        while not (terminated or truncated) and steps < 200:
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            total += float(reward)
            steps += 1
        assert terminated  # random actions let the pole fall well within 200 steps
        assert info["episode"] == {"r": total, "l": steps}
        assert np.isfinite(obs).all()
    finally:
        env.close()
