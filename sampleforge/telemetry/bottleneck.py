"""Which component limits throughput, judged from where the time of a run went."""

from __future__ import annotations


def bottleneck(perf: dict[str, float]) -> str:
    """Name the component that waited least, from the perf/ seconds of a run.

    Rollout workers that mostly wait for actions mean inference or learning is the limit;
    rollout workers that rarely wait mean simulation is.
    """
    stepping = perf.get("perf/rollout_env_step_sec", 0.0)
    waiting = perf.get("perf/rollout_wait_sec", 0.0)
    if stepping + waiting == 0:
        return "unknown"
    if waiting / (stepping + waiting) < 0.3:
        return "sampler-bound"
    learner = perf.get("perf/learner_train_sec", 0.0)
    inference = perf.get("perf/inference_forward_sec", 0.0)
    return "learner-bound" if learner >= inference else "inference-bound"
