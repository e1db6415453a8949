"""The env split that fits an env: the rollout worker's only way to build one."""

from __future__ import annotations

from sampleforge.envs.envpool_env import is_envpool_spec
from sampleforge.envs.registry import EnvSpec
from sampleforge.envs.stepping.env_split import EnvSplit, MultiAgentEnvSplit
from sampleforge.envs.stepping.envpool_split import EnvPoolSplit


def make_env_split(*, env_spec: EnvSpec, **kwargs) -> EnvSplit:
    """The split class that fits the env: one row per env, or one per agent seat; an EnvPool
    task steps its whole batch in one call."""
    if is_envpool_spec(env_spec):
        return EnvPoolSplit(env_spec=env_spec, **kwargs)
    split_type = MultiAgentEnvSplit if env_spec.multi_agent else EnvSplit
    return split_type(env_spec=env_spec, **kwargs)
