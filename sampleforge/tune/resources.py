"""What one trial asks Ray for: a CPU for every process its run starts, and its GPU.

A sampleforge run starts, per trained policy, one learner and `num_inference_workers` inference
workers (frozen opponents get inference workers too), `num_workers` rollout workers, and with
`eval_every_env_steps` one evaluation worker per trained policy (`components/wiring.py: wire`).
Each is a busy process, so each gets a CPU; the trial's own process (the runner) mostly waits
on their reports and shares them. In serial mode everything runs in the trial's process: one
CPU. A run on `cuda` asks for one GPU (or `gpus`, a fraction to share one GPU between trials);
Ray then sets CUDA_VISIBLE_DEVICES, so the trial's `cuda` is the GPU Ray gave it. `auto` asks
for none: Ray would not know the trial uses one, so name `cuda` to have GPUs counted.

Must not: import Ray (the search builds Ray's objects from these numbers) or start anything.
"""

from __future__ import annotations

from sampleforge.config import Config


def component_processes(cfg: Config) -> int:
    """How many processes a run of `cfg` starts besides its runner (1 in serial mode: the
    runner's own)."""
    if cfg.serial_mode:
        return 1
    trained = cfg.num_policies
    acting = cfg.num_policies + cfg.num_frozen_opponents
    evaluation = trained if cfg.eval_every_env_steps is not None else 0
    return trained + acting * cfg.num_inference_workers + cfg.num_workers + evaluation


def uses_gpu(cfg: Config) -> bool:
    """Whether the run names a CUDA device (`cuda` or `cuda:K`)."""
    return cfg.device == "cuda" or cfg.device.startswith("cuda:")


def trial_resources(
    cfg: Config, *, cpus: float | None = None, gpus: float | None = None
) -> dict[str, float]:
    """{"CPU": n, "GPU": g} for one trial of `cfg`, as one bundle (all on one node: the run's
    processes share memory). `cpus`/`gpus` replace the computed numbers when given."""
    cpu = float(component_processes(cfg)) if cpus is None else float(cpus)
    gpu = (1.0 if uses_gpu(cfg) else 0.0) if gpus is None else float(gpus)
    return {"CPU": cpu, "GPU": gpu} if gpu > 0 else {"CPU": cpu}
