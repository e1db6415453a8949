"""Environments: the registry users extend, and the built-in Atari and VizDoom suites.

Responsibility: the public entry points for naming, building and describing environments.
Importing this package registers the ``atari_*`` and ``doom_*`` names without importing ale-py
or vizdoom, the built-in two-player ``duel`` game, and ``pettingzoo:<module>`` names for any
PettingZoo parallel env (multi-agent; see ``multi_agent.py``) and ``envpool:<task id>`` names for
EnvPool's batched C++ envs. MuJoCo tasks are plain Gymnasium ids; ``mujoco.py`` only adds a config preset.

It must not: hold environment logic itself (see ``registry.py``, ``atari.py``, ``doom/``) or
import optional dependencies eagerly.
"""

from sampleforge.envs import atari as _atari  # noqa: F401  (registers the atari_* names)
from sampleforge.envs import doom as _doom  # noqa: F401  (registers the doom_* names)
from sampleforge.envs.envpool_env import envpool_spec
from sampleforge.envs.grid_duel import make_duel, make_duel_vs_bot
from sampleforge.envs.pettingzoo_env import pettingzoo_spec
from sampleforge.envs.registry import (
    EnvContext,
    EnvInfo,
    EnvSpec,
    EnvStartError,
    EpisodeStatistics,
    UnknownEnvError,
    env_info,
    env_seed,
    make_env,
    register_env,
    register_env_resolver,
    registered_envs,
    resolve_env,
)

register_env_resolver(pettingzoo_spec)  # "pettingzoo:<module>" names any parallel env
register_env_resolver(envpool_spec)  # "envpool:<task id>" names any EnvPool task
register_env(
    "duel",
    make_duel,
    multi_agent=True,
    description="Two-player grid duel (built in, numpy): self-play and PBT",
)
register_env(
    "duel_vs_bot",
    make_duel_vs_bot,
    description="The duel against a scripted bot of fixed skill: evaluation, baselines",
)

__all__ = [
    "EnvContext",
    "EnvInfo",
    "EnvSpec",
    "EpisodeStatistics",
    "EnvStartError",
    "UnknownEnvError",
    "env_info",
    "env_seed",
    "make_env",
    "register_env",
    "register_env_resolver",
    "registered_envs",
    "resolve_env",
]
