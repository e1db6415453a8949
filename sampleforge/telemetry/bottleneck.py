"""Which component limits throughput, judged from where the time of a run went."""

from __future__ import annotations

# 1.0 while the learner's sampling gate holds its lead at the bound that keeps the mean policy
# lag near its target (or at a lead set by --sampling_lead_sgd_steps), else 0.0.
LEAD_AT_CAP = "learner/sampling_lead_at_cap"


def bottleneck(scalars: dict[str, float]) -> str:
    """Name the component that holds the run back, from its perf/ seconds (summed over the run)
    and the learner's `LEAD_AT_CAP`.

    Rollout workers that rarely wait mean simulation is the limit (sampler-bound). Workers that
    mostly wait, for a learner that waits for data longer than it trains while the sampling
    gate's lead is at its cap, are held back by the bound on policy lag (lag-bound: datasets
    larger than one split's trajectories, or a longer `--sampling_lead_sgd_steps`, let more
    envs sample at once). Otherwise whichever of learning and inference took longer.
    """
    stepping = scalars.get("perf/rollout_env_step_sec", 0.0)
    waiting = scalars.get("perf/rollout_wait_sec", 0.0)
    if stepping + waiting == 0:
        return "unknown"
    if waiting / (stepping + waiting) < 0.3:
        return "sampler-bound"
    learner = scalars.get("perf/learner_train_sec", 0.0)
    learner_waiting = scalars.get("perf/learner_wait_sec", 0.0)
    if learner_waiting > learner and scalars.get(LEAD_AT_CAP, 0.0) >= 1.0:
        return "lag-bound"
    inference = scalars.get("perf/inference_forward_sec", 0.0)
    return "learner-bound" if learner >= inference else "inference-bound"
