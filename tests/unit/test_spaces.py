"""Unit tests for sampleforge.spaces: specs, observation/action conversion, validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces as gs

from sampleforge.spaces import (
    TensorSpec,
    UnsupportedSpaceError,
    action_spec,
    actions_to_env,
    categorical_sizes,
    check_supported,
    observation_array,
    observation_specs,
    observation_to_dict,
    without_keys,
)

VECTOR_BOX = gs.Box(-1.0, 1.0, (5,), np.float32)


def test_box_observation_specs_keep_uint8_and_cast_rest_to_float32() -> None:
    img = gs.Box(0, 255, (4, 84, 84), np.uint8)
    assert observation_specs(img) == {"obs": TensorSpec((4, 84, 84), torch.uint8)}
    f64 = gs.Box(-1.0, 1.0, (3, 2), np.float64)
    assert observation_specs(f64) == {"obs": TensorSpec((3, 2), torch.float32)}


def test_dict_observation_specs_sorted_keys() -> None:
    space = gs.Dict({"vec": VECTOR_BOX, "img": gs.Box(0, 255, (3, 8, 8), np.uint8)})
    specs = observation_specs(space)
    assert list(specs) == ["img", "vec"]
    assert specs["img"] == TensorSpec((3, 8, 8), torch.uint8)
    assert specs["vec"] == TensorSpec((5,), torch.float32)


@pytest.mark.parametrize(
    "space",
    [
        gs.Text(5),
        gs.Dict({"a": gs.Text(2)}),
        gs.Tuple((VECTOR_BOX,)),
        gs.MultiDiscrete(np.zeros((0,), np.int64)),
    ],
)
def test_unsupported_observation_spaces_raise(space) -> None:
    with pytest.raises(UnsupportedSpaceError, match="supported"):
        observation_specs(space)


def test_observation_to_dict_wraps_and_casts() -> None:
    obs = observation_to_dict(np.zeros(5, np.float64), VECTOR_BOX)
    assert list(obs) == ["obs"] and obs["obs"].dtype == np.float32
    space = gs.Dict({"b": VECTOR_BOX, "a": gs.Box(0, 255, (2, 2), np.uint8)})
    obs = observation_to_dict(space.sample(), space)
    assert list(obs) == ["a", "b"]
    assert obs["a"].dtype == np.uint8 and obs["b"].shape == (5,)


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (gs.Discrete(4), TensorSpec((1,), torch.int64)),
        (gs.MultiDiscrete([3, 3, 2]), TensorSpec((3,), torch.int64)),
        (gs.Tuple((gs.Discrete(3), gs.Discrete(21))), TensorSpec((2,), torch.int64)),
        (gs.Box(-1.0, 1.0, (2,)), TensorSpec((2,), torch.float32)),
        (gs.Box(-1.0, 1.0, (2, 3)), TensorSpec((6,), torch.float32)),
    ],
)
def test_action_spec(space, expected: TensorSpec) -> None:
    assert action_spec(space) == expected


def test_categorical_sizes() -> None:
    assert categorical_sizes(gs.Discrete(4)) == (4,)
    assert categorical_sizes(gs.MultiDiscrete([3, 3, 2])) == (3, 3, 2)
    assert categorical_sizes(gs.Tuple((gs.Discrete(3), gs.Discrete(21)))) == (3, 21)


@pytest.mark.parametrize(
    "space",
    [gs.Text(5), gs.Tuple((gs.Discrete(2), VECTOR_BOX)), gs.MultiBinary(3), gs.Tuple(())],
)
def test_unsupported_action_spaces_raise(space) -> None:
    with pytest.raises(UnsupportedSpaceError):
        action_spec(space)


def test_actions_to_env_discrete_forms() -> None:
    out = actions_to_env(np.array([[2], [0]]), gs.Discrete(4))
    assert out == [2, 0] and all(type(a) is int for a in out)
    assert actions_to_env(np.array([[1]]), gs.Discrete(4, start=-1)) == [0]

    md = actions_to_env(np.array([[2, 0, 1]]), gs.MultiDiscrete([3, 3, 2]))
    assert isinstance(md[0], np.ndarray) and md[0].tolist() == [2, 0, 1]
    assert gs.MultiDiscrete([3, 3, 2]).contains(md[0])

    tup_space = gs.Tuple((gs.Discrete(3), gs.Discrete(21)))
    tup = actions_to_env(np.array([[1, 20], [0, 3]]), tup_space)
    assert tup == [(1, 20), (0, 3)] and all(type(a) is int for a in tup[0])
    assert tup_space.contains(tup[0])


def test_actions_to_env_box_clips_and_reshapes() -> None:
    low = np.array([[-1.0, 0.0], [-2.0, 0.0]], np.float32)
    high = np.array([[1.0, 0.5], [2.0, 3.0]], np.float32)
    space = gs.Box(low, high, dtype=np.float32)
    actions = np.array([[5.0, -5.0, 0.1, 9.0]], np.float32)
    (out,) = actions_to_env(actions, space)
    assert out.shape == (2, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.1, 3.0]], rtol=1e-6)
    assert space.contains(out)


def test_check_supported_accepts_supported_pairs() -> None:
    check_supported(VECTOR_BOX, gs.Discrete(2), "CartPole-v1")
    check_supported(gs.Dict({"x": VECTOR_BOX}), gs.Box(-1, 1, (2,)), "dict-env")


@pytest.mark.parametrize(
    "action_space",
    [gs.Text(5), gs.Graph(gs.Box(-1, 1, (2,)), None), gs.Sequence(gs.Discrete(2))],
)
def test_check_supported_names_env_and_action_space(action_space) -> None:
    with pytest.raises(UnsupportedSpaceError) as info:
        check_supported(VECTOR_BOX, action_space, "MyEnv-v0")
    message = str(info.value)
    assert message.startswith("env 'MyEnv-v0': unsupported action space ")
    assert type(action_space).__name__ in message
    assert message.endswith("supported: Discrete, MultiDiscrete, Tuple(Discrete...), Box")
    assert "\n" not in message


@pytest.mark.parametrize(
    "obs_space",
    [gs.Text(5), gs.Graph(gs.Box(-1, 1, (2,)), None), gs.Sequence(VECTOR_BOX)],
)
def test_check_supported_names_env_and_observation_space(obs_space) -> None:
    with pytest.raises(UnsupportedSpaceError) as info:
        check_supported(obs_space, gs.Discrete(2), "MyEnv-v0")
    message = str(info.value)
    assert message.startswith(
        f"env 'MyEnv-v0': the observation space is a {type(obs_space).__name__} space, "
        "which the models cannot take (supported: Box, Discrete, MultiDiscrete, MultiBinary, "
        "or a Dict of them)"
    )
    assert "ObservationWrapper (see docs/custom_env.md)" in message
    assert "\n" not in message


# A Box whose bounds differ per entry: its repr prints 2-D arrays over several lines.
RAGGED_BOX = gs.Box(np.zeros((3, 3), np.float32), np.arange(1, 10, dtype=np.float32).reshape(3, 3))


@pytest.mark.parametrize(
    ("part", "kind"),
    [
        (gs.Text(20), "a Text space"),
        (gs.Graph(VECTOR_BOX, None), "a Graph space"),
        (gs.Sequence(VECTOR_BOX), "a Sequence space"),
        (gs.Dict({"inner": VECTOR_BOX}), "a Dict space"),
    ],
)
def test_unsupported_dict_key_is_named_in_one_line(part, kind: str) -> None:
    assert "\n" in repr(RAGGED_BOX)  # the old message held the Dict's repr, spanning lines
    space = gs.Dict({"image": RAGGED_BOX, "mission": part, "zz": VECTOR_BOX})
    with pytest.raises(UnsupportedSpaceError) as info:
        check_supported(space, gs.Discrete(2), "TextGame-v0")
    message = str(info.value)
    assert message == (
        f"env 'TextGame-v0': observation key 'mission' is {kind}, which the models cannot take "
        "(supported: Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of them); drop it "
        "with --drop_obs_keys mission or encode it with a gymnasium ObservationWrapper "
        "(see docs/custom_env.md)"
    )


def test_empty_dict_observation_is_rejected_in_one_line() -> None:
    with pytest.raises(UnsupportedSpaceError, match="^the observation space is an empty Dict"):
        observation_specs(gs.Dict({}))


def test_unsupported_action_space_message_is_one_line_despite_ragged_bounds() -> None:
    space = gs.Tuple((gs.Discrete(2), RAGGED_BOX))
    with pytest.raises(UnsupportedSpaceError) as info:
        check_supported(VECTOR_BOX, space, "MyEnv-v0")
    message = str(info.value)
    assert message.startswith("env 'MyEnv-v0': unsupported action space Tuple(Discrete(2), Box(")
    assert "\n" not in message


# --------------------------------------------------------------------------- discrete observations


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (gs.Discrete(4), TensorSpec((), torch.int8, categories=(4,))),
        (gs.Discrete(128, start=-3), TensorSpec((), torch.int8, categories=(128,))),
        (gs.Discrete(129), TensorSpec((), torch.int16, categories=(129,))),
        (gs.Discrete(100_000), TensorSpec((), torch.int32, categories=(100_000,))),
        (gs.MultiDiscrete([3, 300]), TensorSpec((2,), torch.int16, categories=(3, 300))),
        (gs.MultiDiscrete([[2, 3], [4, 5]]), TensorSpec((2, 2), torch.int8, (2, 3, 4, 5))),
        (gs.MultiBinary(5), TensorSpec((5,), torch.int8)),
        (gs.MultiBinary([2, 3]), TensorSpec((2, 3), torch.int8)),
    ],
)
def test_discrete_observations_are_stored_as_compact_integers(space, expected) -> None:
    """Indices, not one-hot vectors, in the smallest signed dtype that holds them (uint8 is
    left to pixels); the categories tell the encoders what to one-hot."""
    assert observation_specs(space) == {"obs": expected}
    assert observation_specs(gs.Dict({"part": space}))["part"] == expected


def test_discrete_observations_become_zero_based_indices() -> None:
    space = gs.Dict(
        {
            "direction": gs.Discrete(4, start=-2),
            "cells": gs.MultiDiscrete([3, 5], start=[1, 10]),
            "flags": gs.MultiBinary(3),
        }
    )
    obs = {"direction": -2, "cells": np.array([3, 10]), "flags": np.array([1, 0, 1])}
    out = observation_to_dict(obs, space)
    assert out["direction"].shape == () and out["direction"].dtype == np.int8
    assert int(out["direction"]) == 0  # the start offset is subtracted
    np.testing.assert_array_equal(out["cells"], [2, 0])
    assert out["cells"].dtype == np.int8
    np.testing.assert_array_equal(out["flags"], [1, 0, 1])
    assert out["flags"].dtype == np.int8
    top = observation_to_dict(7, gs.Discrete(3, start=5))["obs"]
    assert int(top) == 2 and top.shape == ()


def test_observation_array_converts_batches() -> None:
    space = gs.MultiDiscrete([3, 5], start=[1, 10])
    batch = observation_array(np.array([[1, 10], [3, 14]]), space)
    np.testing.assert_array_equal(batch, [[0, 0], [2, 4]])
    np.testing.assert_array_equal(observation_array([6, 5], gs.Discrete(2, start=5)), [1, 0])


@pytest.mark.parametrize(
    ("space", "value"),
    [
        (gs.Discrete(4), 4),
        (gs.Discrete(4, start=1), 0),
        (gs.MultiDiscrete([3, 3], start=[0, -1]), np.array([0, -2])),
        (gs.MultiBinary(2), np.array([0, 2])),
        (gs.Discrete(300), -1),  # would wrap in int16 if it were not checked
    ],
)
def test_discrete_values_outside_the_space_are_refused_in_one_line(space, value) -> None:
    with pytest.raises(ValueError) as info:
        observation_to_dict({"direction": value}, gs.Dict({"direction": space}))
    message = str(info.value)
    assert message.startswith("observation key 'direction' holds ")
    assert f"outside its {type(space).__name__}" in message and "\n" not in message


def test_a_text_key_message_names_the_drop_setting() -> None:
    space = gs.Dict({"image": gs.Box(0, 255, (7, 7, 3), np.uint8), "mission": gs.Text(9)})
    with pytest.raises(UnsupportedSpaceError, match="drop it with --drop_obs_keys mission or"):
        observation_specs(space)


def test_without_keys_drops_the_named_keys() -> None:
    space = gs.Dict({"image": VECTOR_BOX, "direction": gs.Discrete(4), "mission": gs.Text(9)})
    kept = without_keys(space, ["mission"], "MiniGrid")
    assert list(kept.spaces) == ["direction", "image"]
    assert observation_specs(kept)["direction"].categories == (4,)


@pytest.mark.parametrize(
    ("space", "keys", "expected"),
    [
        (
            gs.Dict({"image": VECTOR_BOX, "mission": gs.Text(9)}),
            ["missoin"],
            "env 'MiniGrid': --drop_obs_keys missoin: the observations have no key 'missoin' "
            "(their keys: image, mission)",
        ),
        (
            VECTOR_BOX,
            ["mission"],
            "env 'MiniGrid': --drop_obs_keys mission: the observation space is a Box space, "
            "which has no keys to drop (only Dict observations have keys)",
        ),
        (
            gs.Dict({"mission": gs.Text(9)}),
            ["mission"],
            "env 'MiniGrid': --drop_obs_keys mission drops every observation key; keep at least one",
        ),
    ],
)
def test_without_keys_refuses_in_one_line(space, keys, expected: str) -> None:
    with pytest.raises(UnsupportedSpaceError) as info:
        without_keys(space, keys, "MiniGrid")
    assert str(info.value) == expected
