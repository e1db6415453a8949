"""The result of `sampleforge bench`, printed for people and as JSON for scripts.

JSON keys (stable; scripts read them):
- `env`: the env name;  `num_envs`: total envs simulated during training;
- `pure_sim_fps`: env frames/s with random actions, one process per core, no model;
- `compute_limit_fps`: cores / (env step + inference + learner cost per sample) x frameskip;
- `train_fps`: steady-state env frames/s of the full system after warm-up;
- `train_over_pure_sim`, `train_over_compute_limit`: the two ratios;
- `mean_policy_lag`: mean lag in SGD steps during the measurement;
- plus `cores`, `frameskip`, `inference_batch_size`, `costs_us` (per-sample costs in
  microseconds), `memory_mb`, `bottleneck` and `perf` (seconds per component activity).
"""

from __future__ import annotations

import json
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

    @property
    def train_over_pure_sim(self) -> float:
        return self.train_fps / self.pure_sim_fps if self.pure_sim_fps else float("nan")

    @property
    def train_over_compute_limit(self) -> float:
        return self.train_fps / self.compute_limit_fps if self.compute_limit_fps else float("nan")

    def to_json(self) -> str:
        data = asdict(self)
        data["train_over_pure_sim"] = self.train_over_pure_sim
        data["train_over_compute_limit"] = self.train_over_compute_limit
        return json.dumps(data, sort_keys=True)

    def lines(self) -> list[str]:
        c = self.costs_us
        return [
            f"env {self.env}: {self.num_envs} envs, {self.cores} cores, frameskip {self.frameskip}",
            f"  pure simulation    {self.pure_sim_fps:>12,.0f} frames/s",
            f"  compute limit      {self.compute_limit_fps:>12,.0f} frames/s   (per sample: env "
            f"{c['env_step']:.1f} us + inference {c['inference']:.1f} us at batch "
            f"{self.inference_batch_size:.0f} + learner {c['learner']:.1f} us)",
            f"  training           {self.train_fps:>12,.0f} frames/s   "
            f"{self.sgd_steps_per_1000_samples:.2f} SGD steps per 1,000 samples   mean policy "
            f"lag {self.mean_policy_lag:.1f}",
            f"  training / pure simulation {self.train_over_pure_sim:6.1%}   training / compute "
            f"limit {self.train_over_compute_limit:6.1%}   ({self.bottleneck})",
            f"  memory {self.memory_mb:,.0f} MB ({self.memory_mb / max(self.num_envs, 1):.2f} "
            f"MB per env)",
        ]
