"""Weights set between `train` calls must be the ones the inference workers act with when
training resumes, not only the learner's.

Serial mode, so the run is repeatable: after `set_parameters` with a policy that always pushes
left (CartPole episodes of ~9 steps), the next call's first dataset must be collected with it.
Inference workers only copy weights whose version changed, so `LoadWeights` moves the policy
version on; otherwise they would act with their old copy until the learner's next SGD step.
"""

import pytest
import torch

from sampleforge import APPO


@pytest.mark.timeout(120)
def test_inference_acts_with_the_new_weights_at_once(tmp_path):
    with APPO("CartPole-v1", serial_mode=True, num_envs_per_worker=4, seed=1,
              train_dir=str(tmp_path), report_every_sec=60, tensorboard=False,
              device="cpu") as model:
        model.train(1_000)
        always_left = model.get_parameters()[0]
        always_left["action_head.linear.bias"] = torch.tensor([100.0, -100.0])
        model.set_parameters({0: always_left})
        model.train(1)  # one dataset, collected before the learner's next SGD step
        episodes = model.runner.episodes
        assert episodes.count == 100 and episodes.mean_length < 12, episodes.mean_length
