"""The drop_obs_keys setting: specs whose envs go without some Dict observation keys."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest

from sampleforge.envs import env_info, make_env, register_env, registry, resolve_env
from sampleforge.envs.dropped_obs_keys import DropObservationKeys
from sampleforge.spaces import UnsupportedSpaceError, observation_specs
from sampleforge.testing import minigrid_like_env

MINIGRID = f"{minigrid_like_env.__name__}:{minigrid_like_env.ENV_ID}"


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_INFO_CACHE", {})


def test_without_the_flag_the_text_key_is_refused_naming_the_flag() -> None:
    with pytest.raises(UnsupportedSpaceError) as info:
        env_info(MINIGRID)
    message = str(info.value)
    assert "observation key 'mission' is a Text space" in message
    assert "--drop_obs_keys mission" in message and "\n" not in message


def test_every_env_of_the_spec_goes_without_the_dropped_keys() -> None:
    spec = resolve_env(MINIGRID, drop_obs_keys=["mission"])
    assert spec.drop_obs_keys == ("mission",)
    space = env_info(MINIGRID, drop_obs_keys=["mission"]).observation_space
    assert list(space.spaces) == ["direction", "image"]
    assert observation_specs(space)["direction"].categories == (4,)
    # Worker processes get the spec pickled: the keys travel with it.
    env = make_env(pickle.loads(pickle.dumps(spec)))
    try:
        assert isinstance(env, DropObservationKeys)
        obs, _ = env.reset(seed=0)
        assert set(obs) == {"direction", "image"} and env.observation_space.contains(obs)
        obs, *_ = env.step(0)
        assert set(obs) == {"direction", "image"}
    finally:
        env.close()


def test_a_key_the_env_does_not_have_is_one_line_naming_the_keys_there_are() -> None:
    with pytest.raises(UnsupportedSpaceError) as info:
        env_info(MINIGRID, drop_obs_keys=["missoin"])
    assert str(info.value) == (
        f"env {MINIGRID!r}: --drop_obs_keys missoin: the observations have no key 'missoin' "
        "(their keys: direction, image, mission)"
    )


def test_dropping_keys_of_a_box_observation_is_refused() -> None:
    with pytest.raises(UnsupportedSpaceError, match="Box space, which has no keys to drop"):
        env_info("CartPole-v1", drop_obs_keys=["mission"])


def test_infos_are_cached_per_set_of_dropped_keys() -> None:
    dropped = env_info(MINIGRID, drop_obs_keys=["mission"])
    assert env_info(MINIGRID, drop_obs_keys=["mission"]) is dropped
    both = env_info(MINIGRID, drop_obs_keys=["mission", "direction"])
    assert list(both.observation_space.spaces) == ["image"]


def test_registering_again_forgets_every_cached_variant() -> None:
    register_env("grid", lambda context: gym.make(minigrid_like_env.ENV_ID))
    assert "direction" in env_info("grid", drop_obs_keys=["mission"]).observation_space.spaces
    register_env(
        "grid",
        lambda context: gym.wrappers.FilterObservation(
            gym.make(minigrid_like_env.ENV_ID), ["image", "mission"]
        ),
        overwrite=True,
    )
    assert list(env_info("grid", drop_obs_keys=["mission"]).observation_space.spaces) == ["image"]


def test_multi_agent_envs_are_refused_before_they_are_built() -> None:
    built = []
    register_env("sf_test_seats", lambda context: built.append(context), multi_agent=True)
    with pytest.raises(UnsupportedSpaceError, match="single-agent envs only"):
        make_env(resolve_env("sf_test_seats", drop_obs_keys=["mission"]))
    assert not built
