"""Data-parallel training across processes and machines, on torch.distributed (torchrun).

- `torchrun_rank.py`: which rank this process is, from torchrun's environment.
- `learner_group.py`: one policy's learners across the ranks, as a torch.distributed process
  group: gradient averaging, running statistics merged, state broadcast, the per-round table.
- `rounds.py`: what the ranks decide together before each round of SGD (train, wait, stop).
- `rank_exchange.py`: what a rank's runner shares with rank 0's (episode statistics).

docs/distributed.md tells how each piece keeps the ranks consistent.
"""
