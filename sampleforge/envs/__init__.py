"""Environments: the registry users extend, and the built-in Atari and VizDoom suites.

Responsibility: the public entry points for naming, building and describing environments.
Importing this package registers the ``atari_*`` and ``doom_*`` names without importing ale-py
or vizdoom. MuJoCo tasks are plain Gymnasium ids; ``mujoco.py`` only adds a config preset.

It must not: hold environment logic itself (see ``registry.py``, ``atari.py``, ``doom/``) or
import optional dependencies eagerly.
"""

from sampleforge.envs import atari as _atari  # noqa: F401  (registers the atari_* names)
from sampleforge.envs import doom as _doom  # noqa: F401  (registers the doom_* names)
from sampleforge.envs.registry import (
    EnvContext,
    EnvInfo,
    EnvSpec,
    EpisodeStatistics,
    UnknownEnvError,
    env_info,
    env_seed,
    make_env,
    register_env,
    registered_envs,
    resolve_env,
)

__all__ = [
    "EnvContext",
    "EnvInfo",
    "EnvSpec",
    "EpisodeStatistics",
    "UnknownEnvError",
    "env_info",
    "env_seed",
    "make_env",
    "register_env",
    "registered_envs",
    "resolve_env",
]
