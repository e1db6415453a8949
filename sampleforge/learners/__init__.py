"""Learner families: what trains a policy from the sampler's trajectories, one module per family
(`actor_critic.py`: APPO, IMPALA, A3C), the roles the learner worker needs of each
(`protocols.py`), and the registry that picks a family by `--algorithm` (`registry.py`)."""
