"""How gymnasium spaces map to tensors.

Responsible for:
  * describing the tensors that carry observations and actions (``TensorSpec``),
  * converting one env's raw observation into the canonical ``dict[str, np.ndarray]`` form,
  * converting a batch of policy actions back into what ``env.step`` expects,
  * rejecting unsupported spaces early with one clear error line.

Must not: build networks, allocate shared buffers, or know about workers/processes. It is a
foundation module and imports only numpy, torch and gymnasium.

Conventions:
  * Observations are always a dict of arrays. A non-Dict space becomes ``{"obs": ...}``; a Dict
    space keeps its keys (iterated in sorted order everywhere so layouts are deterministic).
  * Discrete and MultiDiscrete observations (or Dict parts) are stored as zero-based category
    indices (the space's ``start`` subtracted here, the same convention as actions) in the
    smallest signed integer dtype that holds them, so the shared buffers carry integers, not
    one-hot vectors; their ``TensorSpec.categories`` tells the encoders what to one-hot.
    MultiBinary parts are stored as int8 bits. Values outside the space are refused here
    (``ValueError``) rather than wrapped by the narrow dtype or indexed out of range on a device.
  * Actions are always a flat 2-D batch ``[N, A]``. Discrete-like actions are stored as
    zero-based category indices (int64); the space's ``start`` offset is added back only in
    ``actions_to_env``. Box actions are flattened to ``A = prod(shape)`` float32 values and are
    clipped to the space bounds only in ``actions_to_env`` (the learner sees the raw sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces as gym_spaces

OBS_KEY = "obs"

SUPPORTED_OBSERVATION_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of them"
# What to do about an observation (part) the models cannot take; docs/custom_env.md shows how.
_ENCODE_HINT = "encode it with a gymnasium ObservationWrapper (see docs/custom_env.md)"
_DISCRETE_OBSERVATIONS = (gym_spaces.Discrete, gym_spaces.MultiDiscrete, gym_spaces.MultiBinary)
SUPPORTED_ACTION_SPACES = "Discrete, MultiDiscrete, Tuple(Discrete...), Box"

_TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    torch.uint8: np.dtype(np.uint8),
    torch.float32: np.dtype(np.float32),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
}
# Category indices are stored in the first of these that holds the largest one. Signed, so that
# uint8 keeps meaning "pixels" to the encoders and normalisers.
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)


@dataclass(frozen=True)
class TensorSpec:
    """Shape (without batch dims) and dtype of one tensor stream.

    ``categories``: for a Discrete or MultiDiscrete observation (part), the number of categories
    of each element in row-major order (its zero-based indices are what the stream holds, and
    the encoders one-hot encode them); None for everything else (Box, MultiBinary bits).
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    categories: tuple[int, ...] | None = None

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype matching ``dtype`` (for host-side buffers)."""
        return _TORCH_TO_NUMPY[self.dtype]


class UnsupportedSpaceError(ValueError):
    """Raised when an observation or action space cannot be mapped to tensors."""


# --------------------------------------------------------------------------- observations


def _box_obs_spec(space: gym_spaces.Box) -> TensorSpec:
    # uint8 stays uint8 so images are moved and stored at 1 byte/pixel; everything else is
    # float32 because that is what the networks consume.
    dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
    return TensorSpec(shape=tuple(int(d) for d in space.shape), dtype=dtype)


def _index_dtype(categories: tuple[int, ...] | np.ndarray) -> torch.dtype:
    largest_index = int(np.max(categories)) - 1
    return next(d for d in _INDEX_DTYPES if largest_index <= torch.iinfo(d).max)


def _part_spec(space: gym_spaces.Space) -> TensorSpec | None:
    """The spec of one observation (part), or None when the models cannot take it."""
    if isinstance(space, gym_spaces.Box):
        return _box_obs_spec(space)
    if isinstance(space, gym_spaces.MultiBinary):
        return TensorSpec(shape=tuple(int(d) for d in space.shape), dtype=torch.int8)
    if isinstance(space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete)):
        nvec = np.asarray(space.n if isinstance(space, gym_spaces.Discrete) else space.nvec)
        categories = tuple(int(n) for n in nvec.reshape(-1))
        if not categories:
            return None  # a MultiDiscrete of no elements has nothing to encode
        shape = tuple(int(d) for d in nvec.shape)
        return TensorSpec(shape=shape, dtype=_index_dtype(categories), categories=categories)
    return None


def observation_specs(space: gym_spaces.Space) -> dict[str, TensorSpec]:
    """Map an observation space to one ``TensorSpec`` per observation key.

    Box, Discrete, MultiDiscrete or MultiBinary -> ``{"obs": spec}``; a Dict of them -> one
    entry per key, keys sorted. Box specs are uint8 or float32; Discrete -> shape (), and
    MultiDiscrete -> ``nvec.shape``, of zero-based indices with ``categories`` set; MultiBinary
    -> int8 bits of the space's shape. Raises UnsupportedSpaceError (one line, naming the
    offending key of a Dict and the ``--drop_obs_keys`` setting) for anything else.
    """
    if isinstance(space, gym_spaces.Dict) and len(space.spaces) > 0:
        specs: dict[str, TensorSpec] = {}
        for key in sorted(space.spaces):
            sub = space.spaces[key]
            spec = _part_spec(sub)
            if spec is None:
                raise UnsupportedSpaceError(
                    f"observation key {key!r} is {_a_space(sub)}, which the models cannot "
                    f"take (supported: {SUPPORTED_OBSERVATION_SPACES}); drop it with "
                    f"--drop_obs_keys {key} or {_ENCODE_HINT}"
                )
            specs[key] = spec
        return specs
    spec = _part_spec(space)
    if spec is not None:
        return {OBS_KEY: spec}
    raise UnsupportedSpaceError(
        f"the observation space is {_a_space(space)}, which the models cannot take "
        f"(supported: {SUPPORTED_OBSERVATION_SPACES}); {_ENCODE_HINT}"
    )


def _a_space(space: gym_spaces.Space) -> str:
    # The space's kind, not its repr: a repr holds bound arrays that may span several lines.
    kind = type(space).__name__
    if isinstance(space, gym_spaces.Dict) and not space.spaces:
        return "an empty Dict space"
    return f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind} space"


def without_keys(space: gym_spaces.Space, keys: Sequence[str], env_name: str) -> gym_spaces.Dict:
    """``space`` (a Dict) without ``keys``: what an env's observations become under
    ``--drop_obs_keys``. Raises UnsupportedSpaceError (one line, naming the env, the key and
    the keys there are) for a key the space does not have, a non-Dict space, or no key left."""
    setting = f"--drop_obs_keys {','.join(keys)}"
    if not isinstance(space, gym_spaces.Dict):
        raise UnsupportedSpaceError(
            f"env {env_name!r}: {setting}: the observation space is {_a_space(space)}, which "
            "has no keys to drop (only Dict observations have keys)"
        )
    missing = [key for key in keys if key not in space.spaces]
    if missing:
        raise UnsupportedSpaceError(
            f"env {env_name!r}: {setting}: the observations have no key {missing[0]!r} "
            f"(their keys: {', '.join(sorted(space.spaces))})"
        )
    kept = {key: sub for key, sub in space.spaces.items() if key not in keys}
    if not kept:
        raise UnsupportedSpaceError(
            f"env {env_name!r}: {setting} drops every observation key; keep at least one"
        )
    return gym_spaces.Dict(kept)


def observation_to_dict(obs: Any, space: gym_spaces.Space) -> dict[str, np.ndarray]:
    """Convert one env's observation into ``{key: array}`` with the spec dtypes.

    obs: a single (unbatched) observation as returned by ``env.reset``/``env.step``.
    Returns arrays shaped like the spec (no batch dim). Non-dict observations are wrapped as
    ``{"obs": obs}``. Called per env step, so it does not re-validate the space (use
    ``check_supported`` once at start-up); it does check that discrete values lie in the space
    (see the module docstring).
    """
    if isinstance(space, gym_spaces.Dict):
        return {k: observation_array(obs[k], space.spaces[k], k) for k in sorted(space.spaces)}
    return {OBS_KEY: observation_array(obs, space, OBS_KEY)}


def observation_array(value: Any, space: gym_spaces.Space, key: str = OBS_KEY) -> np.ndarray:
    """One observation part, or a batch of them (any leading dims), in its spec's form.

    Box -> uint8 or float32 (as ``observation_specs``); Discrete/MultiDiscrete -> zero-based
    indices (``value - start``) in the spec dtype; MultiBinary -> int8 bits. Raises ValueError
    (one line naming ``key``) for a discrete value outside the space.
    """
    if isinstance(space, _DISCRETE_OBSERVATIONS):
        return _discrete_array(value, space, key)
    # Same dtype rule as _box_obs_spec; asarray avoids a copy when the dtype already matches.
    dtype = np.uint8 if space.dtype == np.uint8 else np.float32
    return np.asarray(value, dtype=dtype)


def _discrete_array(value: Any, space: gym_spaces.Space, key: str) -> np.ndarray:
    raw = np.asarray(value, dtype=np.int64)
    upper: np.ndarray  # the number of categories of each element (2 for bits)
    if isinstance(space, gym_spaces.MultiBinary):
        index, upper = raw, np.asarray(2, np.int64)
    elif isinstance(space, gym_spaces.Discrete):
        index, upper = raw - int(space.start), np.asarray(space.n, np.int64)
    else:
        multi = cast(gym_spaces.MultiDiscrete, space)
        index = raw - np.asarray(multi.start, np.int64)
        upper = np.asarray(multi.nvec, np.int64)
    # One pass for both bounds: a negative index wraps to a huge unsigned value.
    if not np.all(index.astype(np.uint64) < upper.astype(np.uint64)):
        raise ValueError(
            f"observation key {key!r} holds {_short(raw)}, outside its {_one_line(space)}"
        )
    dtype = torch.int8 if isinstance(space, gym_spaces.MultiBinary) else _index_dtype(upper)
    return np.asarray(index.astype(_TORCH_TO_NUMPY[dtype]))


def _short(values: np.ndarray) -> str:
    return " ".join(np.array2string(values, threshold=16).split())


def _one_line(space: gym_spaces.Space) -> str:
    # Box reprs print non-uniform bounds as arrays, which span lines for 2-D shapes.
    return " ".join(repr(space).split())


# --------------------------------------------------------------------------- actions


def _tuple_of_discrete(space: gym_spaces.Space) -> tuple[gym_spaces.Discrete, ...] | None:
    """The elements of a non-empty Tuple(Discrete...) space, or None for any other space."""
    if not isinstance(space, gym_spaces.Tuple) or len(space.spaces) == 0:
        return None
    elements = tuple(s for s in space.spaces if isinstance(s, gym_spaces.Discrete))
    return elements if len(elements) == len(space.spaces) else None


def categorical_sizes(space: gym_spaces.Space) -> tuple[int, ...]:
    """Number of categories of each independent categorical head of a discrete action space.

    Discrete(n) -> (n,); MultiDiscrete(nvec) -> nvec flattened; Tuple(Discrete...) -> one per
    element. Raises UnsupportedSpaceError for non-discrete spaces.
    """
    if isinstance(space, gym_spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym_spaces.MultiDiscrete):
        return tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
    elements = _tuple_of_discrete(space)
    if elements is not None:
        return tuple(int(s.n) for s in elements)
    raise UnsupportedSpaceError(
        f"{_one_line(space)} is not a discrete action space; supported: {SUPPORTED_ACTION_SPACES}"
    )


def action_spec(space: gym_spaces.Space) -> TensorSpec:
    """Map an action space to the spec of one env's action row (the ``A`` in ``[N, A]``).

    Discrete -> ((1,), int64); MultiDiscrete -> ((n,), int64); Tuple(Discrete...) ->
    ((n,), int64); Box -> ((prod(shape),), float32). Raises UnsupportedSpaceError otherwise.
    """
    if isinstance(space, gym_spaces.Box):
        return TensorSpec(shape=(int(np.prod(space.shape, dtype=np.int64)),), dtype=torch.float32)
    if isinstance(space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete)) or (
        _tuple_of_discrete(space) is not None
    ):
        return TensorSpec(shape=(len(categorical_sizes(space)),), dtype=torch.int64)
    raise UnsupportedSpaceError(
        f"unsupported action space {_one_line(space)}; supported: {SUPPORTED_ACTION_SPACES}"
    )


def actions_to_env(actions: np.ndarray, space: gym_spaces.Space) -> list:
    """Split a batch of policy actions into per-env actions in the form ``env.step`` expects.

    actions: [N, A] (int64 category indices or float32 Box values).
    Returns a list of N actions: Discrete -> python int; MultiDiscrete -> np int array shaped
    like ``nvec``; Tuple -> tuple of python ints; Box -> array of the space dtype and shape,
    clipped to the space bounds.
    """
    actions = np.asarray(actions)
    if actions.ndim != 2:
        raise ValueError(f"actions must be [N, A], got shape {actions.shape}")
    if isinstance(space, gym_spaces.Discrete):
        start = int(space.start)
        return [int(a) + start for a in actions[:, 0]]
    if isinstance(space, gym_spaces.MultiDiscrete):
        start_row = np.asarray(space.start, dtype=np.int64).reshape(-1)
        shaped = (actions.astype(np.int64) + start_row).astype(space.dtype)
        return [row.reshape(space.nvec.shape) for row in shaped]
    elements = _tuple_of_discrete(space)
    if elements is not None:
        starts = [int(s.start) for s in elements]
        return [tuple(int(a) + s for a, s in zip(row, starts)) for row in actions]
    if isinstance(space, gym_spaces.Box):
        low = space.low.reshape(-1)
        high = space.high.reshape(-1)
        clipped = np.clip(actions, low, high).astype(space.dtype, copy=False)
        return [row.reshape(space.shape) for row in clipped]
    raise UnsupportedSpaceError(
        f"unsupported action space {_one_line(space)}; supported: {SUPPORTED_ACTION_SPACES}"
    )


# --------------------------------------------------------------------------- validation


def check_supported(
    obs_space: gym_spaces.Space, action_space: gym_spaces.Space, env_name: str
) -> None:
    """Raise UnsupportedSpaceError (one line naming the env and the space) if unsupported."""
    try:
        observation_specs(obs_space)
    except UnsupportedSpaceError as err:
        raise UnsupportedSpaceError(f"env {env_name!r}: {err}") from None
    try:
        action_spec(action_space)
    except UnsupportedSpaceError as err:
        raise UnsupportedSpaceError(f"env {env_name!r}: {err}") from None
