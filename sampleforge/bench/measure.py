"""The three throughput measurements of `sampleforge bench`, each on the same env and model.

- `pure_simulation_fps`: random actions, one process per core, no model: the upper bound of
  the paper's Table 1. Frames = agent steps x frameskip.
- `compute_costs`: seconds per sample of each workload measured alone: an env step (on one
  core, through the same env split a rollout worker steps, so an EnvPool task is measured with
  the batch and threads training uses), a batched inference forward pass at the batch size the
  system actually forms, and the learning work per sample: the family's training probe
  (`learners/registry.py: make_training_probe`) timed per call and divided by the samples of
  sampling a call stands for (a dataset's, all its epochs; for a replay, one update per
  batch_size / samples_per_insert inserted transitions); the two model workloads on the
  training device (`--device`).
  `compute_limit_fps` = cores / (sum of the three): what an ideal asynchronous system sharing
  the cores between the three would reach.
- `training_fps`: the full system, steady state after a warm-up; with it the rates of the
  learner (SGD steps and the agent steps it took in, per second), its last statistics of the
  replay, where it has one, and the CPU the rollout and inference workers used (their
  processes' times in /proc: what the actors cost per agent step, inference included), and
  the learners' (what an update costs in the running system, against its cost alone).

Each stops on Ctrl-C or SIGTERM: the pool's workers ignore SIGINT and end with the pool, and a
training run that a signal stopped raises `Interrupted`.

Must not: change how training runs; it only drives the public components.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from sampleforge.comms.heap import reuse_freed_tensor_memory
from sampleforge.comms.interrupts import (
    Interrupted,
    leave_signals_to_the_parent,
    signals_deferred,
)
from sampleforge.components.runner import Runner
from sampleforge.config import Config
from sampleforge.envs.envpool_env import is_envpool_spec
from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import EnvContext, EnvSpec, env_info, make_env, resolve_env
from sampleforge.envs.stepping.env_split import StepTargets
from sampleforge.envs.stepping.factory import make_env_split
from sampleforge.learners.probe_data import random_actions, random_obs
from sampleforge.learners.registry import make_training_probe
from sampleforge.models.factory import make_policy_model, resolve_device
from sampleforge.spaces import observation_specs
from sampleforge.telemetry.bottleneck import LEAD_AT_CAP

# --- pure simulation ------------------------------------------------------------------------


def _simulate(env_spec: EnvSpec, num_envs: int, seconds: float, index: int) -> int:
    """Step `num_envs` envs with random actions for `seconds`; returns agent steps (every seat
    of a multi-agent env counts, as in training)."""
    torch.set_num_threads(1)
    reuse_freed_tensor_memory()  # as in a rollout worker
    envs = [
        make_env(env_spec, EnvContext(worker_index=index, env_index=i, seed=index * 1000 + i))
        for i in range(num_envs)
    ]
    for env in envs:
        env.reset()
    seats = envs[0].num_agents if isinstance(envs[0], MultiAgentEnv) else None
    space = envs[0].action_space
    # Sampling is not simulation: draw the actions beforehand.
    actions = [
        space.sample() if seats is None else [space.sample() for _ in range(seats)]
        for _ in range(1024)
    ]
    steps, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(actions[steps % 1024])
            if np.all(np.logical_or(terminated, truncated)):  # every seat done
                env.reset()
            steps += 1
    for env in envs:
        env.close()
    return steps * (seats or 1)


def pure_simulation_fps(
    env_name: str, *, processes: int, envs_per_process: int, seconds: float
) -> float:
    """Env frames per second of `processes` processes stepping envs with random actions."""
    spec = resolve_env(env_name)
    # The workers ignore SIGINT (deferred until they do): a Ctrl-C at a terminal reaches the
    # whole process group, and a worker killed by it would be replaced while its share was
    # lost, so the call would never return. The caller acts on it; leaving the pool ends them.
    with signals_deferred((signal.SIGINT,)):
        pool = multiprocessing.get_context("spawn").Pool(
            processes, initializer=leave_signals_to_the_parent, initargs=(False,)
        )
    with pool:
        steps = pool.starmap(
            _simulate, [(spec, envs_per_process, seconds, i) for i in range(processes)]
        )
    return sum(steps) * spec.frameskip / seconds


# --- compute limit --------------------------------------------------------------------------


@dataclass(frozen=True)
class ComputeCosts:
    """Seconds per sample (agent step) of each workload, measured alone on one core."""

    env_step: float
    inference: float
    learner: float
    inference_batch_size: int
    device: str = "cpu"  # where inference and learner were measured
    sgd_step: float = float("nan")  # seconds per SGD step of the learner
    sgd_steps_per_sample: float = float("nan")  # the learning work behind `learner`

    def limit_fps(self, cores: int, frameskip: int) -> float:
        return cores / (self.env_step + self.inference + self.learner) * frameskip

    def learner_limit_fps(self, learners: int, frameskip: int) -> float:
        """What `learners` learner processes alone could take in, each as fast as it was
        measured (on one torch thread): the limit of a learner-bound run whose learner cannot
        spread over the cores the compute limit counts (one on more threads can pass it)."""
        return learners / self.learner * frameskip if self.learner > 0 else math.inf


def _time_per_call(fn, min_seconds: float, warm_up: bool = True) -> float:
    if warm_up:
        fn()  # allocations, lazy initialisation
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def compute_costs(
    cfg: Config, inference_batch_size: int, seconds: float = 3.0, rounds: int = 5
) -> ComputeCosts:
    """Per-sample cost of each workload: the median of `rounds` interleaved measurements of
    `seconds / rounds` each, so that a burst of noise from a shared host lands in one round of
    one workload instead of in the whole of one."""
    torch.set_num_threads(1)
    reuse_freed_tensor_memory()  # the heap policy of the component processes
    env = env_info(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop)
    env_spec = resolve_env(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop)
    device = resolve_device(cfg.device)
    model = make_policy_model(cfg, env.observation_space, env.action_space).to(device).eval()
    obs = random_obs(observation_specs(env.observation_space), (inference_batch_size,), device)
    rnn = torch.zeros(inference_batch_size, int(model.rnn_state_size), device=device)

    def infer():
        with torch.inference_mode():
            model.act(obs, rnn)
        _synchronize(device)

    # The learner's work on one core: a bootstrap thread would spread it over two.
    one_core = cfg.replace(learner_bootstrap_thread=False)
    probe = make_training_probe(
        one_core, env.observation_space, env.action_space, device, env.frame_stacked_keys
    )
    try:

        def train():
            probe.train_once()
            _synchronize(device)

        step_envs = _EnvStepper(cfg, env_spec)
        try:
            infer(), train()  # warm up once: allocations, lazy initialisation
            per_round = seconds / rounds
            env_step, inference, per_call = [], [], []
            for _ in range(rounds):
                env_step.append(step_envs(per_round))
                inference.append(
                    _time_per_call(infer, per_round, warm_up=False) / inference_batch_size
                )
                per_call.append(_time_per_call(train, per_round, warm_up=False))
        finally:
            step_envs.close()
    finally:
        probe.close()
    call = statistics.median(per_call)
    return ComputeCosts(
        statistics.median(env_step),
        statistics.median(inference),
        call / probe.samples_per_call,
        inference_batch_size,
        str(device),
        sgd_step=call / probe.sgd_steps_per_call,
        sgd_steps_per_sample=probe.sgd_steps_per_call / probe.samples_per_call,
    )


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a timing includes it (CUDA runs async)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _EnvStepper:
    """Seconds per agent step of the env, stepped as a rollout worker steps it."""

    def __init__(self, cfg: Config, env_spec: EnvSpec) -> None:
        self.env_spec = env_spec
        self.split = None
        if is_envpool_spec(env_spec):
            # One split of a rollout worker: EnvPool steps its whole batch with its threads.
            per_split = max(1, cfg.num_envs_per_worker // cfg.worker_num_splits)
            self.split = make_env_split(
                env_spec=env_spec,
                worker_index=0,
                first_env_index=0,
                num_envs=per_split,
                seed=0,
                error_policy="fail",
            )
            self.targets = _step_targets(self.split.num_rows, env_spec)
            self.split.reset_all(self.targets.next_obs)
            space = env_info(env_spec.name, drop_obs_keys=env_spec.drop_obs_keys).action_space
            rng = np.random.default_rng(0)
            self.actions = [random_actions(space, (self.split.num_rows,), rng) for _ in range(64)]

    def __call__(self, seconds: float) -> float:
        if self.split is None:
            return seconds / max(_simulate(self.env_spec, 1, seconds, 0), 1)
        steps, deadline = 0, time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < deadline:
            self.split.step(self.actions[steps % len(self.actions)], self.targets)
            steps += 1
        return (time.perf_counter() - start) / (steps * self.split.num_rows)

    def close(self) -> None:
        if self.split is not None:
            self.split.close()


def _step_targets(rows: int, env_spec: EnvSpec) -> StepTargets:
    specs = observation_specs(
        env_info(env_spec.name, drop_obs_keys=env_spec.drop_obs_keys).observation_space
    )
    return StepTargets(
        rewards=np.zeros(rows, np.float32),
        dones=np.zeros(rows, np.float32),
        valids=np.zeros(rows, np.float32),
        next_obs={k: np.zeros((rows, *s.shape), s.numpy_dtype) for k, s in specs.items()},
    )


# --- training -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingMeasurement:
    fps: float
    mean_policy_lag: float
    mean_inference_batch: float
    perf: dict[str, float]
    memory_mb: float
    sgd_steps_per_sec: float = float("nan")  # the learners' updates, all policies together
    transitions_per_sec: float = float("nan")  # agent steps the learners took in
    learner_stats: dict[str, float] = field(default_factory=dict)  # the last report's replay/
    # and learner/ statistics (`replay/samples_per_insert`, `replay/bytes_per_transition`, ...)
    actor_cores: float | None = None  # the CPU the rollout and inference workers took, in cores
    learner_cores: float | None = None  # ... and the learners (all their threads), in cores


class _Progress(NamedTuple):
    """What `training_fps` reads at each report of the learners."""

    time: float
    frames: int
    lag_sum: float
    lag_reports: int
    updates: int
    env_steps: int
    actor_cpu: float | None
    learner_cpu: float | None


def training_fps(cfg: Config, *, warmup_sec: float, measure_sec: float) -> TrainingMeasurement:
    """Steady-state env frames per second of the full system (after `warmup_sec`)."""
    samples: list[_Progress] = []
    with Runner(cfg) as runner:
        runner.start()
        actors = _component_pids(runner.host.pids(), _ACTOR_COMPONENTS)
        learners = _component_pids(runner.host.pids(), _LEARNER_COMPONENTS)

        def record(status) -> bool:
            p = runner.progress
            samples.append(
                _Progress(
                    time=time.monotonic(),
                    frames=p.frames_collected,
                    lag_sum=p.lag_sum,
                    lag_reports=p.lag_reports,
                    updates=sum(p.policy_version.values()),
                    env_steps=p.total_env_steps,
                    actor_cpu=_cpu_seconds(actors),
                    learner_cpu=_cpu_seconds(learners),
                )
            )
            return True

        runner.train(
            seconds=warmup_sec + measure_sec,
            callback=record,
            # A dataset's worth, or a slot's if smaller: a replay learner at one update per
            # step (continuous control) reports after every few of them, not every dataset.
            callback_every_env_steps=max(
                1, min(cfg.dataset_size, cfg.rollout * cfg.envs_per_split)
            ),
        )
        if runner.stop_signal is not None:  # the runner stopped on it: so does the benchmark
            raise Interrupted(runner.stop_signal)  # (closing the runner on the way)
        memory = _tree_memory_mb(os.getpid())
        perf = dict(runner.progress.timings)
        perf.update(
            {
                k: v
                for k, v in runner.progress.last_stats.items()
                if k.startswith("perf/") or k == LEAD_AT_CAP
            }
        )
        batches = (runner.progress.inference_batches, runner.progress.inference_samples)
        stats = {
            k: v
            for k, v in runner.progress.last_stats.items()
            if k.startswith(("replay/", "learner/"))
        }
    mean_batch = batches[1] / batches[0] if batches[0] else float("nan")
    # Progress arrives once per learner iteration: a window that saw fewer than two of them
    # (a slow config or a loaded machine) has no rate to give, and says so with NaN.
    measured = [s for s in samples if s.time - samples[0].time >= warmup_sec]
    if len(measured) < 2:
        nan = float("nan")
        return TrainingMeasurement(nan, nan, mean_batch, perf, memory, nan, nan, stats)
    start, end = measured[0], measured[-1]
    seconds = end.time - start.time
    return TrainingMeasurement(
        fps=(end.frames - start.frames) / seconds,
        mean_policy_lag=(end.lag_sum - start.lag_sum) / max(end.lag_reports - start.lag_reports, 1),
        mean_inference_batch=mean_batch,
        perf=perf,
        memory_mb=memory,
        sgd_steps_per_sec=(end.updates - start.updates) / seconds,
        # The learners count env steps in frames: a transition is one agent step.
        transitions_per_sec=(end.env_steps - start.env_steps) / seconds / _frameskip(cfg),
        learner_stats=stats,
        actor_cores=_cores(start.actor_cpu, end.actor_cpu, seconds),
        learner_cores=_cores(start.learner_cpu, end.learner_cpu, seconds),
    )


def _cores(cpu_start: float | None, cpu_end: float | None, seconds: float) -> float | None:
    """The cores a set of processes kept busy between two readings of their CPU seconds."""
    if cpu_start is None or cpu_end is None:
        return None
    return (cpu_end - cpu_start) / seconds


# The hosts' component names
_ACTOR_COMPONENTS = ("rollout_worker_", "inference_worker_")
_LEARNER_COMPONENTS = ("learner_",)


def _component_pids(pids: dict[str, int], prefixes: tuple[str, ...]) -> list[int] | None:
    """The processes of the components named with `prefixes` (None where they are not
    processes of their own: serial mode runs every component in the runner's)."""
    found = [pid for name, pid in pids.items() if name.startswith(prefixes)]
    if not found or os.getpid() in found:
        return None
    return found


def _cpu_seconds(pids: list[int] | None) -> float | None:
    """User and system CPU seconds of `pids` and all their threads and children so far (Linux's
    /proc); None without /proc, or when a process has gone."""
    if pids is None:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for root in pids:
        for pid in _tree(root):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return None
            # Fields after the command name (which may hold spaces) in brackets: utime and
            # stime are the 12th and 13th of them.
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def _frameskip(cfg: Config) -> int:
    return env_info(cfg.env, drop_obs_keys=cfg.obs_keys_to_drop).frameskip


def _tree_memory_mb(root: int) -> float:
    """Proportional set size of `root` and everything below it (the components are the fork
    server's children, not the runner's): shared memory counted once."""
    total = 0.0
    for pid in _tree(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def _tree(root: int) -> list[int]:
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:  # any thread may have started a child
            try:
                frontier.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return found
