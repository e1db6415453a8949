"""Stepping a rollout worker's envs in groups (splits) and writing each step into the shared
trajectory buffer: one row per env (`EnvSplit`), one per agent seat (`MultiAgentEnvSplit`), or a
whole EnvPool batch in one call (`EnvPoolSplit`). `make_env_split` picks the one that fits."""
