"""PettingZoo parallel environments as sampleforge multi-agent environments.

Responsibility: adapt a PettingZoo ``ParallelEnv`` (dicts keyed by agent name, agents leaving
``env.agents`` as they finish) to :class:`~sampleforge.envs.multi_agent.MultiAgentEnv` (lists
and arrays indexed by seat), and provide a picklable factory that builds any PettingZoo parallel
env from its module path or PettingZoo registry id, plus the ``pettingzoo:<module or id>``
naming convention for such envs.

It must not: import pettingzoo at import time (it is an optional dependency, and the adapter
only relies on the parallel API's shape, so it also wraps look-alike envs), register names in
the registry, convert or validate observations (the runtime does that through
``sampleforge.spaces``), reset the env on its own, or enforce action masks.

Seats are ``env.possible_agents`` in order. Every agent must have the same observation and
action space, because ``MultiAgentEnv`` describes the spaces of one seat. A seat is done once
the env reports it terminated or truncated, or once it leaves ``env.agents`` without either
flag (counted as terminated). From then on until ``reset`` its seat gets a placeholder
observation (see :func:`placeholder_observation`), reward 0, its done flags kept set and an
empty info, and its action is not passed to the env. A seat missing from ``env.agents`` right
after ``reset`` is done from the start.

Observations are passed through as the env gives them. Many PettingZoo envs (the classic board
and card games) give ``Dict`` observations with an ``"action_mask"`` entry: it reaches the
policy as an ordinary observation key, and nothing here stops an illegal action reaching the
env. The placeholder for a finished seat sets every entry of an ``"action_mask"`` to 1, so code
that does apply masks never meets a row with no legal action.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from sampleforge.envs.multi_agent import MultiAgentEnv, MultiAgentStep
from sampleforge.envs.registry import EnvContext, EnvSpec

PETTINGZOO_PREFIX = "pettingzoo:"
ACTION_MASK_KEY = "action_mask"
INSTALL_HINT = "pip install 'sampleforge[pettingzoo]'"


class PettingZooParallelEnv(MultiAgentEnv):
    """A PettingZoo parallel env seen as a ``MultiAgentEnv``; see the module docstring."""

    def __init__(self, env: Any, name: str | None = None) -> None:
        """Wrap ``env`` (a PettingZoo ``ParallelEnv``); ``name`` is used in error messages."""
        self.env = env
        self.name = name if name is not None else _env_label(env)
        self.agent_names: tuple[str, ...] = tuple(env.possible_agents)
        if not self.agent_names:
            raise ValueError(f"PettingZoo env {self.name!r} has no possible_agents")
        self.num_agents = len(self.agent_names)
        self.observation_space, self.action_space = _shared_spaces(env, self.name, self.agent_names)
        # Built now so an unsupported space fails at construction, not when a seat first leaves.
        placeholder_observation(self.observation_space)
        # All seats start done: stepping before the first reset is an error, not a silent no-op.
        self._alive = np.zeros(self.num_agents, dtype=bool)
        self._terminated = np.ones(self.num_agents, dtype=bool)
        self._truncated = np.zeros(self.num_agents, dtype=bool)

    @property
    def alive(self) -> np.ndarray:
        """Bool array ``[num_agents]``: the seats still playing in the current episode."""
        return self._alive.copy()

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
        """Start a new episode; ``seed`` goes to the PettingZoo env's ``reset``."""
        observations, infos = self.env.reset(seed=seed)
        present = self._current_agents()
        self._alive = np.array([name in present for name in self.agent_names], dtype=bool)
        # A seat absent from the start has left already; counting it as terminated keeps
        # "done" meaning the same thing for every seat.
        self._terminated = ~self._alive
        self._truncated = np.zeros(self.num_agents, dtype=bool)
        obs_list = [
            self._live_observation(observations, name) if alive else self._placeholder()
            for name, alive in zip(self.agent_names, self._alive)
        ]
        info_list = [
            dict(infos.get(name, {})) if alive else {}
            for name, alive in zip(self.agent_names, self._alive)
        ]
        return obs_list, info_list

    def step(self, actions: Sequence[Any]) -> MultiAgentStep:
        """Apply one action per seat; actions of done seats are dropped, never sent."""
        if len(actions) != self.num_agents:
            raise ValueError(
                f"PettingZoo env {self.name!r} expects {self.num_agents} actions "
                f"(one per seat), got {len(actions)}"
            )
        if not self._alive.any():
            raise RuntimeError(
                f"PettingZoo env {self.name!r}: every seat is done; call reset() first"
            )
        live_actions = {
            name: actions[seat] for seat, name in enumerate(self.agent_names) if self._alive[seat]
        }
        observations, rewards, terminations, truncations, infos = self.env.step(live_actions)
        present = self._current_agents()

        obs_list: list[Any] = []
        info_list: list[dict[str, Any]] = []
        reward_array = np.zeros(self.num_agents, dtype=np.float32)
        for seat, name in enumerate(self.agent_names):
            if not self._alive[seat]:
                # Left earlier: whatever the env still says about this agent is ignored.
                obs_list.append(self._placeholder())
                info_list.append({})
                continue
            reward_array[seat] = float(rewards.get(name, 0.0))
            terminated = bool(terminations.get(name, False))
            truncated = bool(truncations.get(name, False))
            if not (terminated or truncated) and name not in present:
                terminated = True  # left without saying why: treat it as a real ending
            if terminated or truncated:
                self._alive[seat] = False
                self._terminated[seat] = terminated
                self._truncated[seat] = truncated
                # The final observation is optional in PettingZoo; the contract only needs a
                # value in the space for the seat.
                final = observations.get(name)
                obs_list.append(self._placeholder() if final is None else final)
            else:
                obs_list.append(self._live_observation(observations, name))
            info_list.append(dict(infos.get(name, {})))
        return (
            obs_list,
            reward_array,
            self._terminated.copy(),
            self._truncated.copy(),
            info_list,
        )

    def close(self) -> None:
        """Close the wrapped PettingZoo env."""
        self.env.close()

    def _current_agents(self) -> set[str]:
        present = set(self.env.agents)
        unknown = present.difference(self.agent_names)
        if unknown:
            raise ValueError(
                f"PettingZoo env {self.name!r} has agents {sorted(map(str, unknown))} that are "
                f"not in possible_agents {list(self.agent_names)}; only a fixed set of seats "
                "is supported"
            )
        return present

    def _live_observation(self, observations: dict[str, Any], name: str) -> Any:
        if name not in observations:
            raise ValueError(
                f"PettingZoo env {self.name!r} gave no observation for live agent {name!r}"
            )
        return observations[name]

    def _placeholder(self) -> Any:
        # A fresh value each time, so a consumer writing into it cannot corrupt later steps.
        return placeholder_observation(self.observation_space)


def placeholder_observation(space: gym.Space) -> Any:
    """A fixed observation in ``space``, given to seats that have finished their episode.

    Zeros where zero is in the space, else the value nearest zero (Box, MultiDiscrete,
    Discrete use their lower bound / ``start``). ``Dict`` and ``Tuple`` are built per entry; a
    Dict entry named ``"action_mask"`` is all ones (every action legal) so masked policies stay
    well defined. Raises TypeError for spaces with no obvious fixed value (e.g. Text, Graph).
    """
    if isinstance(space, gym.spaces.Box):
        zeros = np.zeros(space.shape, dtype=space.dtype)
        return np.clip(zeros, space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(space.start, dtype=space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype).reshape(space.nvec.shape)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, gym.spaces.Dict):
        return {key: _dict_entry_placeholder(key, sub) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(placeholder_observation(sub) for sub in space.spaces)
    raise TypeError(
        f"no placeholder observation for {space!r}; supported: Box, Discrete, MultiDiscrete, "
        "MultiBinary, and Dict/Tuple of them"
    )


def _dict_entry_placeholder(key: str, space: gym.Space) -> Any:
    if key == ACTION_MASK_KEY and isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        ones = np.ones(space.shape, dtype=space.dtype)
        if isinstance(space, gym.spaces.Box):
            return np.clip(ones, space.low, space.high).astype(space.dtype)
        return ones
    return placeholder_observation(space)


def make_pettingzoo_env(module: str, context: EnvContext, **kwargs: Any) -> PettingZooParallelEnv:
    """Build the PettingZoo parallel env ``module`` with ``kwargs``, as a ``MultiAgentEnv``.

    ``module`` is either an importable module with a ``parallel_env`` function, such as
    ``"pettingzoo.classic.rps_v2"`` or ``"mpe2.simple_spread_v3"``, or, when it contains a
    ``/``, an id in PettingZoo's own registry such as ``"butterfly/knights_archers_zombies_v11"``
    (built with ``pettingzoo.make("parallel", ...)``; PettingZoo 1.27 deprecates importing its
    built-in env modules in favour of these ids). ``context.render_mode`` is passed as
    ``render_mode`` unless ``kwargs`` sets it. Seeding is the caller's: pass the seed to
    ``reset``. ``functools.partial(make_pettingzoo_env, module, **kwargs)`` is a picklable
    registry factory.
    """
    if context.render_mode is not None:
        kwargs.setdefault("render_mode", context.render_mode)
    if "/" in module:
        env = _make_registered(module, kwargs)
    else:
        env = _parallel_env_function(module)(**kwargs)
    return PettingZooParallelEnv(env, name=pettingzoo_env_name(module))


def pettingzoo_env_name(module: str) -> str:
    """The sampleforge name of the PettingZoo env ``module`` (a module path or registry id):
    ``"pettingzoo:" + module``."""
    return PETTINGZOO_PREFIX + module


def pettingzoo_module(name: str) -> str | None:
    """The module path or registry id a ``pettingzoo:...`` name refers to, else None."""
    if name.startswith(PETTINGZOO_PREFIX) and len(name) > len(PETTINGZOO_PREFIX):
        return name[len(PETTINGZOO_PREFIX) :]
    return None


def _make_registered(env_id: str, kwargs: dict[str, Any]) -> Any:
    try:
        import pettingzoo
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"cannot build PettingZoo env {env_id!r}: 'pettingzoo' is not installed; {INSTALL_HINT}"
        ) from exc
    make = getattr(pettingzoo, "make", None)
    if make is None:
        raise ImportError(
            f"PettingZoo {getattr(pettingzoo, '__version__', '?')} has no registry for ids like "
            f"{env_id!r}; upgrade it, or name the env's module instead "
            "(e.g. 'pettingzoo.butterfly.knights_archers_zombies_v11')"
        )
    # Unknown ids and missing extras raise PettingZoo's own errors, which name both.
    return make("parallel", env_id, **kwargs)


def _parallel_env_function(module: str) -> Any:
    parallel_env = getattr(_import_env_module(module), "parallel_env", None)
    if not callable(parallel_env):
        raise ValueError(
            f"{module!r} has no parallel_env(); only PettingZoo envs with the parallel API are "
            "supported (turn-based AEC-only envs such as chess are not)"
        )
    return parallel_env


def _import_env_module(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ImportError(_missing_module_message(module, exc.name or "")) from exc


def _missing_module_message(module: str, missing: str) -> str:
    top_level = module.split(".")[0]
    if missing == top_level:
        hint = INSTALL_HINT if top_level == "pettingzoo" else f"pip install {top_level}"
        return f"cannot import PettingZoo env {module!r}: {top_level!r} is not installed; {hint}"
    if missing == module or module.startswith(missing + "."):
        return (
            f"cannot import PettingZoo env {module!r}: no module {missing!r} in the installed "
            f"{top_level!r} (check the name and version suffix)"
        )
    # A dependency of the env itself; PettingZoo groups those by family in its extras.
    parts = module.split(".")
    if top_level == "pettingzoo" and len(parts) > 2:
        hint = f"pip install 'pettingzoo[{parts[1]}]'"
    else:
        hint = f"pip install the package providing {missing!r}"
    return f"PettingZoo env {module!r} needs {missing!r}, which is not installed; {hint}"


def _shared_spaces(env: Any, name: str, agents: tuple[str, ...]) -> tuple[gym.Space, gym.Space]:
    spaces = {agent: (env.observation_space(agent), env.action_space(agent)) for agent in agents}
    first_obs, first_act = spaces[agents[0]]
    if all(obs == first_obs and act == first_act for obs, act in spaces.values()):
        return first_obs, first_act
    # Group agents by their spaces so the one-line message stays short for many agents.
    groups: dict[str, list[str]] = {}
    for agent, (obs, act) in spaces.items():
        groups.setdefault(f"observation {obs}, action {act}", []).append(str(agent))
    described = "; ".join(f"{agents_} have {spaces_}" for spaces_, agents_ in groups.items())
    raise ValueError(
        f"PettingZoo env {name!r}: agents have different spaces ({described}); sampleforge "
        "supports only envs whose agents all share one observation and one action space "
        "(pad them first, e.g. with SuperSuit's pad_observations_v0 and pad_action_space_v0)"
    )


def _env_label(env: Any) -> str:
    metadata = getattr(env, "metadata", None) or {}
    return str(metadata.get("name") or type(env).__name__)


def pettingzoo_spec(name: str) -> EnvSpec | None:
    """The spec of a ``pettingzoo:<module or registry id>`` name (a registry resolver)."""
    module = pettingzoo_module(name)
    if module is None:
        return None
    return EnvSpec(
        name=name,
        factory=functools.partial(make_pettingzoo_env, module),
        description=f"PettingZoo parallel env {module}",
        multi_agent=True,
    )
