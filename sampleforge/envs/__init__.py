"""Environments: the registry users extend, and the built-in Atari suite.

Responsibility: the public entry points for naming, building and describing environments.
Importing this package registers the ``atari_*`` names without importing ale-py.

It must not: hold environment logic itself (see ``registry.py`` and ``atari.py``) or import
optional dependencies eagerly.
"""

from sampleforge.envs import atari as _atari  # noqa: F401  (registers the atari_* names)
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
