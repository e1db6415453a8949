"""The result of `sampleforge bench`, printed for people and as JSON for scripts.

JSON keys (stable; scripts read them):
- `env`: the env name;  `num_envs`: total envs simulated during training;
- `pure_sim_fps`: env frames/s with random actions, one process per core, no model;
- `compute_limit_fps`: cores / (env step + inference + learner cost per sample) x frameskip;
- `train_fps`: steady-state env frames/s of the full system after warm-up;
- `learner_limit_fps`: what the learners alone take in (one per policy, each at its cost per
  sample measured on one thread, min with the compute limit): a learner-bound run's limit when
  one learner process cannot spread over the cores the compute limit counts; a learner on more
  threads can pass it (`learner_threads_spin`);
- `train_over_pure_sim`, `train_over_compute_limit`, `train_over_learner_limit`: the ratios
  (null when withheld: see
  `load_pure_sim` / `load_costs`, the median number of runnable tasks during the two isolated
  measurements; a ratio is withheld when either exceeded what the measurement itself runs,
  `cores` and 1, by more than half a core, because another job was taking cores then);
- `mean_policy_lag`: mean lag in SGD steps during the measurement;
- `sgd_steps_per_sec`: the learners' SGD steps (updates) per second during the measurement;
  `transitions_per_sec`: the agent steps the learners took in per second (a replay's inserted
  transitions; an on-policy learner's trained samples);
- a learner with a replay (null otherwise): `samples_per_insert` (the replay ratio its rate
  limiter observed since learning started), `replay_bytes_per_transition` (memory the replay
  holds per stored transition), `replay_size` (transitions it can sample from now), and
  `replay_speed` (`bench/replay_speed.py`, on a replay filled by random play of the env, one
  thread): `bytes_per_transition_held` (that replay's), `bytes_per_transition_at_capacity`
  (a full replay of `replay_size`), `compressed_bytes_per_frame`, `batches_per_sec` and
  `batches_per_cpu_sec` (stacked batches of `batch_size` sampled and decoded),
  `sum_tree_samples_per_sec`, `sum_tree_updates_per_sec` and their `_per_cpu_sec` (a 1M sum
  tree, batches of 256);
- `actor_cores`: the CPU the rollout and inference workers used during the measurement, in
  cores (null in serial mode or without Linux's /proc); `agent_steps_per_actor_core_sec`: the
  agent steps they delivered per second of that CPU (for a replay, transitions inserted), so
  CNN inference is counted with the env;
- `learner_cores`: the CPU the learner processes used during the measurement (all their
  threads: the update, the bootstrap passes, the replay's sampler), in cores (null as
  `actor_cores`); `learner_cpu_us_per_update`: that CPU per update in microseconds, to set
  beside `costs_us["sgd_step"]`, the same update's time alone on one thread: how much more an
  update costs inside the running system, where it shares the cores;
- plus `cores`, `frameskip`, `inference_batch_size`, `costs_us` (per-sample costs in
  microseconds: `env_step`, `inference`, `learner`, and `sgd_step`, the time of one learner
  update measured alone), `memory_mb`, `bottleneck` and `perf` (seconds per component
  activity).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field


@dataclass
class BenchReport:
    env: str
    num_envs: int
    cores: int
    frameskip: int
    pure_sim_fps: float
    compute_limit_fps: float
    train_fps: float
    mean_policy_lag: float
    sgd_steps_per_1000_samples: float  # the learning work per sample behind train_fps
    inference_batch_size: float
    costs_us: dict[str, float]
    memory_mb: float
    bottleneck: str
    perf: dict[str, float] = field(default_factory=dict)
    load_pure_sim: float | None = None  # runnable tasks during pure simulation (median)
    load_costs: float | None = None  # ... and during the per-sample costs
    device: str = "cpu"  # where inference and learner costs were measured
    sgd_steps_per_sec: float = float("nan")
    transitions_per_sec: float = float("nan")
    samples_per_insert: float | None = None  # these four: learners with a replay only
    replay_bytes_per_transition: float | None = None
    replay_size: float | None = None
    replay_speed: dict[str, float | None] | None = None  # bench/replay_speed.py: ReplaySpeed
    learner_limit_fps: float = float("nan")
    actor_cores: float | None = None  # CPU the rollout and inference workers took, in cores
    learner_cores: float | None = None  # ... and the learners, in cores

    @property
    def load_problem(self) -> str | None:
        """Why the ratios cannot be trusted (another job was taking cores), or None."""
        expected = {
            "pure simulation": (self.load_pure_sim, self.cores),
            "per-sample costs": (self.load_costs, 1),
        }
        for what, (load, own) in expected.items():
            if load is not None and load > own + 0.5:
                return (
                    f"the machine ran {load:.1f} tasks during {what}, which itself runs "
                    f"{own}: another job was taking cores"
                )
        return None

    @property
    def train_over_pure_sim(self) -> float | None:
        if self.load_problem:
            return None
        return self.train_fps / self.pure_sim_fps if self.pure_sim_fps else float("nan")

    @property
    def train_over_compute_limit(self) -> float | None:
        if self.load_problem:
            return None
        return self.train_fps / self.compute_limit_fps if self.compute_limit_fps else float("nan")

    @property
    def train_over_learner_limit(self) -> float | None:
        if self.load_problem:
            return None
        limit = self.learner_limit_fps
        return self.train_fps / limit if limit and not math.isnan(limit) else float("nan")

    @property
    def agent_steps_per_actor_core_sec(self) -> float | None:
        """Agent steps the actors delivered (a replay's inserted transitions) per second of
        their CPU."""
        if not self.actor_cores:
            return None
        if self.samples_per_insert is not None:
            steps = self.transitions_per_sec
        else:
            steps = self.train_fps / self.frameskip
        return steps / self.actor_cores

    @property
    def learner_cpu_us_per_update(self) -> float | None:
        """The learners' CPU per update during training, in microseconds (all their threads)."""
        if self.learner_cores is None or not self.sgd_steps_per_sec > 0:
            return None
        return self.learner_cores / self.sgd_steps_per_sec * 1e6

    def to_json(self) -> str:
        data = asdict(self)
        data["agent_steps_per_actor_core_sec"] = self.agent_steps_per_actor_core_sec
        data["learner_cpu_us_per_update"] = self.learner_cpu_us_per_update
        data["train_over_pure_sim"] = self.train_over_pure_sim
        data["train_over_compute_limit"] = self.train_over_compute_limit
        data["train_over_learner_limit"] = self.train_over_learner_limit
        return json.dumps(data, sort_keys=True)

    def _ratio_line(self) -> str:
        problem = self.load_problem
        if problem:
            return f"  ratios withheld: {problem}; measure again on a quiet machine"
        return (
            f"  training / pure simulation {self.train_over_pure_sim:6.1%}   training / "
            f"compute limit {self.train_over_compute_limit:6.1%}   training / learner limit "
            f"{self.train_over_learner_limit:6.1%}   ({self.bottleneck})"
        )

    def _load_line(self) -> str:
        def shown(load: float | None) -> str:
            return "unknown" if load is None else f"{load:.1f}"

        return (
            f"  machine load (runnable tasks): {shown(self.load_pure_sim)} during pure "
            f"simulation ({self.cores} of them its own), {shown(self.load_costs)} during "
            f"per-sample costs (1 its own)"
        )

    def _update_cost(self, qualifier: str = "") -> str:
        update = self.costs_us.get("sgd_step")
        if update is None or math.isnan(update):
            return ""
        return f" ({update:,.0f} us an update{qualifier})"

    def _replay_lines(self) -> list[str]:
        if self.samples_per_insert is None:
            return []
        return [
            f"  replay             {self.transitions_per_sec:>12,.0f} transitions inserted/s   "
            f"{self.sgd_steps_per_sec:,.1f} updates/s   {self.samples_per_insert:.1f} samples "
            f"per insert",
            f"                     {self.replay_bytes_per_transition or 0.0:>12,.0f} bytes per "
            f"transition   {self.replay_size or 0.0:,.0f} transitions to sample from",
            *self._replay_speed_lines(),
        ]

    def _cpu_lines(self) -> list[str]:
        """What the actors delivered per core of their CPU, and the learners' CPU an update."""
        lines = []
        per_core = self.agent_steps_per_actor_core_sec
        if per_core is not None and self.actor_cores is not None:
            lines.append(
                f"  actors             {per_core:>12,.0f} agent steps/s per core   (rollout and "
                f"inference workers used {self.actor_cores:.2f} cores)"
            )
        per_update = self.learner_cpu_us_per_update
        if per_update is not None and self.learner_cores is not None:
            lines.append(
                f"  learner CPU        {per_update:>12,.0f} us an update, all its threads   (the "
                f"learners used {self.learner_cores:.2f} cores){self._update_cost(' alone')}"
            )
        return lines

    def _replay_speed_lines(self) -> list[str]:
        speed = self.replay_speed
        if not speed:
            return []
        frame = speed["compressed_bytes_per_frame"]
        frames = "" if frame is None else f"   ({frame:,.0f} bytes a compressed frame)"
        return [
            f"  replay when full   {speed['bytes_per_transition_at_capacity']:>12,.0f} bytes per "
            f"transition{frames}",
            f"  replay sampling    {speed['batches_per_cpu_sec']:>12,.0f} batches per CPU "
            f"second, one thread   sum tree (1M, batches of 256): "
            f"{speed['sum_tree_samples_per_cpu_sec']:,.0f} draws and "
            f"{speed['sum_tree_updates_per_cpu_sec']:,.0f} updates per CPU second",
        ]

    def lines(self) -> list[str]:
        c = self.costs_us
        return [
            f"env {self.env}: {self.num_envs} envs, {self.cores} cores, frameskip {self.frameskip}",
            f"  pure simulation    {self.pure_sim_fps:>12,.0f} frames/s",
            f"  compute limit      {self.compute_limit_fps:>12,.0f} frames/s   (per sample: env "
            f"{c['env_step']:.1f} us + inference {c['inference']:.1f} us at batch "
            f"{self.inference_batch_size:.0f} + learner {c['learner']:.1f} us"
            f"{self._update_cost()}; model on {self.device})",
            f"  learner limit      {self.learner_limit_fps:>12,.0f} frames/s   (the learners "
            f"alone, at that cost)",
            f"  training           {self.train_fps:>12,.0f} frames/s   "
            f"{self.sgd_steps_per_1000_samples:.2f} SGD steps per 1,000 samples   mean policy "
            f"lag {self.mean_policy_lag:.1f}",
            *self._replay_lines(),
            *self._cpu_lines(),
            self._ratio_line(),
            self._load_line(),
            f"  memory {self.memory_mb:,.0f} MB ({self.memory_mb / max(self.num_envs, 1):.2f} "
            f"MB per env)",
        ]
