"""Many evaluation episodes fast: a pool of processes, each with its own envs and a CPU copy of
the policy.

Responsibility: spread episode indices over worker processes and gather their results. Each
process builds the policy once, in its first task (from the config and a state dict), and
plays its share of episodes with `EpisodeRunner`; episode ``i`` is seeded the same way wherever
it runs, so a deterministic policy gives the same numbers as an in-process evaluation.

Must not: train, read checkpoints (the caller passes weights), or outlive the call. Its
processes ignore SIGINT: a Ctrl-C at a terminal reaches the whole process group, and a worker
that died of it would be replaced by the pool while its episodes were lost, so that the call
never returned. The caller alone acts on it; leaving the pool terminates the workers. For the
same reason nothing that can fail runs in the pool's initializer: the pool replaces a process
whose initializer raised and runs it again, for ever; a task's error comes back to `map`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Mapping

import numpy as np
import torch

from sampleforge.comms.interrupts import leave_signals_to_the_parent, signals_deferred
from sampleforge.config import Config
from sampleforge.envs.registry import EnvSpec, make_env
from sampleforge.evaluation.episodes import (
    DEFAULT_NUM_ENVS,
    EpisodeRunner,
    EvaluationResult,
    run_episodes,
)
from sampleforge.evaluation.local_policy import LocalPolicy

# Set in each pool process by _init_process.
_process_state: dict = {}


def evaluate_in_processes(
    cfg: Config,
    env_spec: EnvSpec,
    state_dict: Mapping[str, torch.Tensor],
    *,
    num_episodes: int,
    num_processes: int | None = None,
    seed: int | None = None,
    deterministic: bool = True,
    envs_per_process: int = DEFAULT_NUM_ENVS,
) -> EvaluationResult:
    """Play `num_episodes` episodes in `num_processes` processes (default: one per core).

    `env_spec` is sent to the processes as it is (a factory defined at the top level of a
    module pickles; a lambda does not). One process runs the episodes in this process.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes: {num_episodes} must be >= 1")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes: {num_processes} must be >= 1 (or None: one per core)")
    processes = min(num_processes or os.cpu_count() or 1, num_episodes)
    weights = {k: v.detach().cpu() for k, v in state_dict.items()}
    policy = _build_policy(cfg, env_spec, weights)  # weights that do not fit fail here, at once
    if processes == 1:
        return run_episodes(
            policy,
            env_spec,
            num_episodes,
            seed=seed,
            deterministic=deterministic,
            num_envs=envs_per_process,
        )
    chunks = [chunk.tolist() for chunk in np.array_split(np.arange(num_episodes), processes)]
    context = multiprocessing.get_context("spawn")
    # Deferred in the workers (and the pool's threads, which start any replacement) until each
    # ignores it (`_init_process`); this thread takes it again as soon as the pool exists.
    with signals_deferred((signal.SIGINT,)):
        pool = context.Pool(
            processes,
            initializer=_init_process,
            initargs=(cfg, env_spec, weights, seed, deterministic, envs_per_process),
        )
    with pool:  # leaving it, also on Ctrl-C or SIGTERM (`cli/signals.py`), ends the workers
        parts = pool.map(_play, chunks, chunksize=1)
    return EvaluationResult.from_episodes(triple for part in parts for triple in part)


def _build_policy(cfg: Config, env_spec: EnvSpec, weights: dict) -> LocalPolicy:
    env = make_env(env_spec)  # the spec, not the name: it may not be registered here
    try:
        return LocalPolicy.build(cfg, env.observation_space, env.action_space, state_dict=weights)
    finally:
        env.close()


def _init_process(
    cfg: Config,
    env_spec: EnvSpec,
    weights: dict,
    seed: int | None,
    deterministic: bool,
    envs_per_process: int,
) -> None:
    leave_signals_to_the_parent(survive_sigterm=False)  # `Pool.terminate` sends SIGTERM
    torch.set_num_threads(1)  # the pool has one process per core already
    _process_state.update(
        cfg=cfg,
        weights=weights,
        env_spec=env_spec,
        seed=seed,
        deterministic=deterministic,
        num_envs=envs_per_process,
    )


def _play(episodes: list[int]) -> list[tuple[int, float, int]]:
    state = _process_state
    if "policy" not in state:  # this process's first task (see the module doc)
        state["policy"] = _build_policy(state["cfg"], state["env_spec"], state.pop("weights"))
    if state["seed"] is not None:
        # Stochastic sampling differs per chunk, repeatably.
        torch.manual_seed(state["seed"] + 7919 * (episodes[0] + 1))
    with EpisodeRunner(
        state["policy"],
        state["env_spec"],
        episodes,
        seed=state["seed"],
        deterministic=state["deterministic"],
        num_envs=state["num_envs"],
    ) as runner:
        runner.run()
        return list(runner.results)
