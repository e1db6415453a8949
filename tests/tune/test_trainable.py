"""The trainable alone (no Ray cluster): a restored trial continues the saved learner whole, and
a trial asks Ray for a CPU per process its run really starts."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.tune", reason="the ray extra is not installed")

from sampleforge import APPO  # noqa: E402
from sampleforge.config import make_config  # noqa: E402
from sampleforge.tune.resources import component_processes, trial_resources  # noqa: E402
from sampleforge.tune.trainable import TRIAL_KEY, SampleforgeTrainable  # noqa: E402

RUN = {"algorithm": "appo", "env": "CartPole-v1", "serial_mode": True, "num_workers": 1}
STEPS = 2048


def _trainable(tmp_path: Path, **settings) -> SampleforgeTrainable:
    trial = {"env_steps_per_iteration": STEPS, "trials_dir": str(tmp_path / "trials")}
    return SampleforgeTrainable({**RUN, "num_envs_per_worker": 8, **settings, TRIAL_KEY: trial})


def test_a_restored_trial_continues_the_saved_learner_with_its_own_settings(tmp_path):
    donor = _trainable(tmp_path, learning_rate=1e-3)
    donor.train()
    saved = donor.train()
    checkpoint = donor.save(str(tmp_path / "ray_checkpoint"))
    member = _trainable(tmp_path, learning_rate=2e-4, adam_beta1=0.8)
    try:
        member.restore(checkpoint)
        resumed = member.train()
        # The member's learner started from the donor's weights and optimizer state...
        assert resumed["restored_weights_sha256"] == saved["weights_sha256"]
        assert resumed["restored_optimizer_sha256"] == saved["optimizer_sha256"]
        assert resumed["restored_env_steps"] == saved["env_steps"]
        # ...went on counting from them (a fresh optimizer starts from 0; so do env steps)...
        assert resumed["optimizer_steps"] > saved["optimizer_steps"]
        assert resumed["env_steps"] >= saved["env_steps"] + STEPS
        # ...in a folder of its own, under its own settings.
        assert resumed["experiment_dir"] != saved["experiment_dir"]
        assert member._algorithm is not None
        assert member._algorithm.hyperparameters["learning_rate"] == 2e-4
        assert member._algorithm.hyperparameters["adam_beta1"] == 0.8
    finally:
        donor.stop()
        member.stop()


def test_a_trial_asks_for_a_cpu_per_process_its_run_starts(tmp_path):
    settings = {"num_workers": 2, "num_inference_workers": 2, "eval_every_env_steps": 10_000}
    with APPO("CartPole-v1", train_dir=str(tmp_path), num_envs_per_worker=2, **settings) as run:
        run.get_parameters()  # starts every process
        started = len(run.runner.host.pids())
        cfg = run.cfg
    assert component_processes(cfg) == started == 2 + 2 + 1 + 1  # rollout, inference, learner, eval
    request = SampleforgeTrainable.default_resource_request(
        {**RUN, **settings, "serial_mode": False, TRIAL_KEY: {"env_steps_per_iteration": 1}}
    )
    assert request.bundles == [{"CPU": started}]
    serial = make_config(env="CartPole-v1", serial_mode=True, num_workers=4)
    assert trial_resources(serial) == {"CPU": 1.0}
    on_gpu = make_config(env="CartPole-v1", device="cuda", num_workers=3)
    assert trial_resources(on_gpu) == {"CPU": 5.0, "GPU": 1.0}
    assert trial_resources(on_gpu, gpus=0.25) == {"CPU": 5.0, "GPU": 0.25}
