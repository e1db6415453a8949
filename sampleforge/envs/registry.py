"""Environment registry: maps names to factories and builds environments from them.

Responsibility: let users register their own environment factories from their own code,
resolve a name (a sampleforge name first, then any Gymnasium id, then Gymnasium's
``module:EnvId`` form, which imports ``module`` so it registers ``EnvId``), build the environment
with episode statistics attached, derive per-(worker, env) seeds, and describe an
environment's spaces without the caller keeping an instance around. That description comes
from a probe env, built and reset once (single-agent envs): an env that cannot be built, or
whose first observation does not have the shape its space declares, is refused there with a
one-line ``EnvStartError`` naming it, before any worker starts.

It must not: know about any particular environment family (Atari lives in ``atari.py``),
step environments for training, touch models or processes, or reset environments on the
caller's behalf (the first ``reset(seed=...)`` belongs to whoever drives the env; the probe env
is the registry's own).
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sampleforge.envs.dropped_obs_keys import DropObservationKeys
from sampleforge.envs.stepping.faults import scalar_reward
from sampleforge.spaces import (
    OBS_KEY,
    UnsupportedSpaceError,
    check_supported,
    observation_specs,
    observation_to_dict,
)

if TYPE_CHECKING:
    from sampleforge.envs.multi_agent import MultiAgentEnv


class UnknownEnvError(ValueError):
    """Raised when a name is neither a registered sampleforge env nor a Gymnasium id (also when
    the module of a ``module:EnvId`` name cannot be imported)."""


class EnvStartError(ValueError):
    """The probe env of :func:`env_info` could not be built or reset, or its first
    observation does not have the shape its space declares. One line, naming the env and
    carrying the original exception's type and message."""


@dataclass(frozen=True)
class EnvContext:
    """Where an environment instance lives, so each instance can differ (seed, rendering)."""

    worker_index: int = 0
    env_index: int = 0
    seed: int | None = None
    render_mode: str | None = None

    def __post_init__(self) -> None:
        # Negative indices would make seed derivation ambiguous (and SeedSequence rejects them).
        if self.worker_index < 0 or self.env_index < 0:
            raise ValueError(
                f"worker_index and env_index must be >= 0, got "
                f"({self.worker_index}, {self.env_index})"
            )
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be None or >= 0, got {self.seed}")


@dataclass(frozen=True)
class EnvSpec:
    """How to build one kind of environment, plus facts the trainer needs about it."""

    name: str
    # Returns a `MultiAgentEnv` instead when `multi_agent` is set.
    factory: Callable[[EnvContext], gym.Env | MultiAgentEnv]
    # Emulator frames per agent step; throughput is reported in frames, as is customary.
    frameskip: int = 1
    reward_threshold: float | None = None
    description: str = ""
    # The factory returns a `MultiAgentEnv` (several agent seats) rather than a gymnasium.Env.
    multi_agent: bool = False
    # Dict observation keys `make_env` removes (the `drop_obs_keys` setting; see
    # `dropped_obs_keys.py`), so every consumer of the spec sees the same reduced space.
    drop_obs_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvInfo:
    """Static description of an environment, computed once per name and process.

    For a multi-agent env the spaces are those of one agent seat."""

    observation_space: gym.Space
    action_space: gym.Space
    frameskip: int
    reward_threshold: float | None
    num_agents: int = 1
    # Reward-shaping coefficients PBT may mutate, with their defaults (multi-agent envs).
    reward_shaping: dict[str, float] = field(default_factory=dict)
    # Observation keys whose first axis stacks the env's last frames (`frame_stacked_keys`).
    frame_stacked_keys: tuple[str, ...] = ()


class _RewardIsANumber(gym.Wrapper):
    """Checks (and makes a float of) the reward of each step; see `EpisodeStatistics`."""

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, scalar_reward(reward), terminated, truncated, info


class EpisodeStatistics(gym.wrappers.RecordEpisodeStatistics, _RewardIsANumber):
    """Adds ``info["episode"] = {"r": float, "l": int}`` on the step that ends an episode.

    Place it directly around the raw environment, under any reward clipping or
    episodic-life wrapper, so it reports the true return of the real episode. ``l`` counts
    steps of the environment it wraps (emulator frames when that env does no frame skip).
    Gymnasium's wrapper does the counting; this subclass only narrows the record to plain
    Python numbers, because it is sent between processes and NumPy scalars or the extra
    wall-clock field would leak into every consumer.

    Gymnasium's ``step`` adds the reward to the return first thing: a reward of None or a
    string would fail there with an unrelated TypeError, and an array would make the return an
    array. `_RewardIsANumber` comes after it in the method order, so its check runs on the
    inner env's result before that, without a wrapper layer of its own (``.env`` stays the raw
    env).
    """

    def __init__(self, env: gym.Env) -> None:
        # Each episode is reported as it ends; gymnasium's rolling history of the last 100
        # episodes per env is never read, and on Atari it kept growing for the first half hour.
        super().__init__(env, buffer_length=1)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if "episode" in info:
            record = info["episode"]
            info["episode"] = {"r": float(record["r"]), "l": int(record["l"])}
        return obs, reward, terminated, truncated, info


_REGISTRY: dict[str, EnvSpec] = {}
# Keyed by (name, dropped observation keys).
_INFO_CACHE: dict[tuple[str, tuple[str, ...]], EnvInfo] = {}
# Families whose names are patterns rather than a list (e.g. "pettingzoo:<module>").
_RESOLVERS: list[Callable[[str], "EnvSpec | None"]] = []
_ale_registration_tried = False
# The module part of Gymnasium's "module:EnvId" names: a dotted Python module path.
_MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def register_env(
    name: str,
    factory: Callable[[EnvContext], gym.Env | MultiAgentEnv],
    *,
    frameskip: int = 1,
    reward_threshold: float | None = None,
    description: str = "",
    overwrite: bool = False,
    multi_agent: bool = False,
) -> None:
    """Register ``factory`` under ``name``; ``factory(context)`` must return a gymnasium.Env,
    or a ``sampleforge.envs.multi_agent.MultiAgentEnv`` when ``multi_agent`` is true."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"environment name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    if not isinstance(frameskip, int) or frameskip < 1:
        raise ValueError(f"frameskip for {name!r} must be an int >= 1, got {frameskip!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(
            f"environment {name!r} is already registered; pass overwrite=True to replace it"
        )
    _REGISTRY[name] = EnvSpec(
        name=name,
        factory=factory,
        frameskip=frameskip,
        reward_threshold=None if reward_threshold is None else float(reward_threshold),
        description=description,
        multi_agent=multi_agent,
    )
    # A replaced factory may have different spaces.
    for cached in [key for key in _INFO_CACHE if key[0] == name]:
        del _INFO_CACHE[cached]


def register_env_resolver(resolver: Callable[[str], EnvSpec | None]) -> None:
    """Let ``resolver(name)`` build specs for names no one registered one by one (it returns
    None for names that are not its own)."""
    _RESOLVERS.append(resolver)


def registered_envs() -> list[str]:
    """Names registered with sampleforge (not Gymnasium ids), sorted."""
    return sorted(_REGISTRY)


def resolve_env(name: str, *, drop_obs_keys: Sequence[str] = ()) -> EnvSpec:
    """Find the spec for ``name``: a sampleforge name first, then a Gymnasium id.

    ``module:EnvId`` (Gymnasium's own syntax, for a name no resolver such as ``pettingzoo:``
    or ``envpool:`` claims) imports ``module``, which registers ``EnvId`` with Gymnasium, and
    resolves ``EnvId``. The spec's factory imports the module again where it runs, so spawned
    worker processes can build the env without having imported anything themselves.
    ``drop_obs_keys``: Dict observation keys every env built from the spec goes without.
    """
    spec = _resolve_env(name)
    return replace(spec, drop_obs_keys=tuple(drop_obs_keys)) if drop_obs_keys else spec


def _resolve_env(name: str) -> EnvSpec:
    if name in _REGISTRY:
        return _REGISTRY[name]
    for resolver in _RESOLVERS:
        spec = resolver(name)
        if spec is not None:
            return spec
    module_spec = _resolve_module_env(name)
    if module_spec is not None:
        return module_spec
    gym_spec = gym.registry.get(name)
    if gym_spec is None:
        # ALE ids only exist in gymnasium's registry once ale_py is imported; do it only
        # on a miss so importing sampleforge stays cheap and works without ale-py.
        _register_ale_ids()
        gym_spec = gym.registry.get(name)
    if gym_spec is None:
        raise UnknownEnvError(_unknown_env_message(name))
    return _spec_from_gymnasium(gym_spec)


def env_seed(context: EnvContext) -> int | None:
    """A seed distinct per (worker_index, env_index) derived from ``context.seed``.

    Returns None when ``context.seed`` is None, meaning "do not seed".
    """
    if context.seed is None:
        return None
    # SeedSequence hashes (seed, worker, env) so neighbouring indices get unrelated streams,
    # unlike seed + index which makes run A's env 1 equal to run B's env 0.
    sequence = np.random.SeedSequence(
        context.seed, spawn_key=(context.worker_index, context.env_index)
    )
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def make_env(name: str | EnvSpec, context: EnvContext = EnvContext()) -> gym.Env:
    """Build the environment ``name`` (or an already resolved spec) for ``context``, with
    episode statistics attached.

    Worker processes are given the resolved ``EnvSpec`` rather than the name: an env a user
    registered in their own script is then built there too, with no registration in the child.
    The spaces are seeded from :func:`env_seed`; the caller still passes
    ``reset(seed=env_seed(context))`` on the first reset.
    """
    spec = name if isinstance(name, EnvSpec) else resolve_env(name)
    name = spec.name
    if spec.multi_agent and spec.drop_obs_keys:
        raise UnsupportedSpaceError(
            f"env {name!r}: --drop_obs_keys works on single-agent envs only; drop the keys "
            "in the multi-agent env itself"
        )
    env = spec.factory(context)
    if spec.multi_agent:
        return _checked_multi_agent(name, env, context)
    if not isinstance(env, gym.Env):
        raise TypeError(
            f"factory for {name!r} returned {type(env).__name__}, expected a gymnasium.Env"
        )
    if not _has_episode_statistics(env):
        env = EpisodeStatistics(env)
    if spec.drop_obs_keys:
        try:
            env = DropObservationKeys(env, spec.drop_obs_keys, name)
        except UnsupportedSpaceError:
            env.close()
            raise
    _seed_spaces(env, context)
    return env


def _checked_multi_agent(name: str, env: Any, context: EnvContext) -> Any:
    from sampleforge.envs.multi_agent import MultiAgentEnv

    if not isinstance(env, MultiAgentEnv):
        raise TypeError(
            f"factory for multi-agent env {name!r} returned {type(env).__name__}, "
            "expected a sampleforge.envs.multi_agent.MultiAgentEnv"
        )
    # Episode statistics of multi-agent envs are counted per seat by the rollout worker.
    _seed_spaces(env, context)
    return env


def _seed_spaces(env: Any, context: EnvContext) -> None:
    seed = env_seed(context)
    if seed is not None:
        env.action_space.seed(seed)
        env.observation_space.seed(seed)


def env_info(name: str, *, drop_obs_keys: Sequence[str] = ()) -> EnvInfo:
    """Spaces and facts of ``name``, from one throwaway instance (cached per name)."""
    cache_key = (name, tuple(drop_obs_keys))
    cached = _INFO_CACHE.get(cache_key)
    if cached is not None:
        return cached
    spec = resolve_env(name, drop_obs_keys=drop_obs_keys)
    try:
        env = make_env(spec)
    except UnsupportedSpaceError:
        raise  # a --drop_obs_keys that does not fit the env: already one line naming it
    except Exception as e:  # the user's factory or env class: any error, told in one line
        raise EnvStartError(
            f"env {name!r} could not be created: {_one_line(e)}{_render_mode_hint(e)}"
        ) from e
    try:
        info = EnvInfo(
            observation_space=env.observation_space,
            action_space=env.action_space,
            frameskip=spec.frameskip,
            reward_threshold=spec.reward_threshold,
            num_agents=int(getattr(env, "num_agents", 1)) if spec.multi_agent else 1,
            reward_shaping=dict(getattr(env, "reward_shaping_defaults", {})),
            frame_stacked_keys=() if spec.multi_agent else frame_stacked_keys(env),
        )
        _check_supported_spaces(name, info)
        if not spec.multi_agent:
            # Not multi-agent envs: a duel's reset starts its game servers; its workers check.
            _probe_first_observation(name, env)
    finally:
        env.close()
    _INFO_CACHE[cache_key] = info
    return info


def frame_stacked_keys(env: gym.Env) -> tuple[str, ...]:
    """The observation keys of ``env`` whose first axis stacks its last frames, each new
    observation shifting in one (a replay then stores each frame once): the observation of
    gymnasium's ``FrameStackObservation`` when no wrapper above it changes the space, or what
    the env or a wrapper declares in a ``frame_stacked_keys`` attribute (EnvPool's Atari)."""
    layer: Any = env
    while True:
        declared = getattr(layer, "frame_stacked_keys", None)
        if declared is not None:
            return tuple(declared)
        if isinstance(layer, gym.wrappers.FrameStackObservation):
            space = env.observation_space
            unchanged = layer.observation_space == space and isinstance(space, gym.spaces.Box)
            return (OBS_KEY,) if unchanged else ()
        if not isinstance(layer, gym.Wrapper):
            return ()
        layer = layer.env


def observation_shape_problem(obs: Any, space: gym.Space) -> str | None:
    """How one observation differs in shape from what ``space`` declares (for an error line:
    "an observation of shape (3,), but its observation space declares (4,)"), or None."""
    try:
        parts = observation_to_dict(obs, space)
    except Exception as e:  # noqa: BLE001 - a missing Dict key, a value that is no array
        return f"an observation that does not fit its observation space ({_one_line(e)})"
    for key, spec in observation_specs(space).items():
        shape = tuple(parts[key].shape)
        if shape != spec.shape:
            part = "an observation" if key == OBS_KEY else f"observation key {key!r}"
            return f"{part} of shape {shape}, but its observation space declares {spec.shape}"
    return None


def _probe_first_observation(name: str, env: gym.Env) -> None:
    try:
        obs, _ = env.reset()
    except Exception as e:
        raise EnvStartError(f"env {name!r} failed in its first reset: {_one_line(e)}") from e
    problem = observation_shape_problem(obs, env.observation_space)
    if problem is not None:
        raise EnvStartError(f"env {name!r} returned {problem} (at its first reset)")


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def _render_mode_hint(error: BaseException) -> str:
    if isinstance(error, TypeError) and "render_mode" in str(error):
        return (
            " (sampleforge passes render_mode to gymnasium.make: give the env's constructor "
            "a render_mode=None argument)"
        )
    return ""


def _spec_from_gymnasium(
    gym_spec: gym.envs.registration.EnvSpec, module: str | None = None
) -> EnvSpec:
    # ALE's v5 ids skip frames inside the env; count them so FPS stays in frames.
    frameskip = gym_spec.kwargs.get("frameskip", 1)
    threshold = gym_spec.reward_threshold
    if module is None:
        name = gym_spec.id
        factory = partial(_make_gymnasium_env, gym_spec.id)
        description = f"Gymnasium environment {gym_spec.id}"
    else:
        name = f"{module}:{gym_spec.id}"
        factory = partial(_make_module_gymnasium_env, module, gym_spec.id)
        description = f"Gymnasium environment {gym_spec.id}, registered by importing {module}"
    return EnvSpec(
        name=name,
        factory=factory,
        frameskip=frameskip if isinstance(frameskip, int) and frameskip >= 1 else 1,
        reward_threshold=None if threshold is None else float(threshold),
        description=description,
    )


def _make_gymnasium_env(env_id: str, context: EnvContext) -> gym.Env:
    # A module-level function in a partial (not a lambda) keeps specs picklable for workers.
    return gym.make(env_id, render_mode=context.render_mode)


def _make_module_gymnasium_env(module: str, env_id: str, context: EnvContext) -> gym.Env:
    # A spawned worker has not imported the module that registers the id: import it here.
    _import_env_module(module, f"{module}:{env_id}")
    return _make_gymnasium_env(env_id, context)


def _resolve_module_env(name: str) -> EnvSpec | None:
    """The spec of a Gymnasium ``module:EnvId`` name, or None when ``name`` is not one."""
    module, colon, env_id = name.partition(":")
    if not colon or not env_id or _MODULE_PATH.fullmatch(module) is None:
        return None
    if gym.registry.get(name) is not None:
        return None  # an id that itself contains ':' (Gymnasium allows it) resolves as it is
    _import_env_module(module, name)
    gym_spec = gym.registry.get(env_id)
    if gym_spec is None:
        raise UnknownEnvError(
            _unknown_env_message(env_id, note=f" (importing {module!r} did not register it)")
        )
    return _spec_from_gymnasium(gym_spec, module)


def _import_env_module(module: str, name: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as err:  # any failure of the user's module, not only ImportError
        raise UnknownEnvError(
            f"environment {name!r}: cannot import module {module!r} ({_one_line(err)})"
        ) from err


def _register_ale_ids() -> None:
    global _ale_registration_tried
    if _ale_registration_tried:
        return
    _ale_registration_tried = True
    try:
        import ale_py
    except ImportError:
        return  # without ale-py there are simply no ALE ids to find
    gym.register_envs(ale_py)


def _unknown_env_message(name: str, note: str = "") -> str:
    candidates = list(_REGISTRY) + list(gym.registry)
    # Compare case-insensitively so "cartpole-v1" still finds "CartPole-v1".
    by_lower = {candidate.lower(): candidate for candidate in candidates}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=3, cutoff=0.6)
    message = f"unknown environment {name!r}{note}"
    if close:
        suggestions = ", ".join(repr(by_lower[match]) for match in close)
        return f"{message}; did you mean {suggestions}?"
    return f"{message}; see sampleforge.envs.registered_envs() or gymnasium.registry"


def _has_episode_statistics(env: gym.Env) -> bool:
    # Gymnasium's own RecordEpisodeStatistics counts too: wrapping twice would trip its
    # assertion that "episode" is not already in info.
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.RecordEpisodeStatistics):
            return True
        env = env.env
    return False


def _check_supported_spaces(name: str, info: EnvInfo) -> None:
    check_supported(info.observation_space, info.action_space, name)
