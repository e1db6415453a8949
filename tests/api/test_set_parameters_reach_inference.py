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
from sampleforge.checkpoint.store import CheckpointStore


@pytest.mark.timeout(120)
def test_inference_acts_with_the_new_weights_at_once(tmp_path):
    with APPO(
        "CartPole-v1",
        serial_mode=True,
        num_envs_per_worker=4,
        seed=1,
        train_dir=str(tmp_path),
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
    ) as model:
        model.train(1_000)
        always_left = model.get_parameters()[0]
        always_left["action_head.linear.bias"] = torch.tensor([100.0, -100.0])
        model.set_parameters({0: always_left})
        model.train(1)  # one dataset, collected before the learner's next SGD step
        episodes = model.runner.progress.episodes
        assert episodes.count == 100 and episodes.mean_length < 12, episodes.mean_length


def _marked(state: dict, value: float) -> dict:
    """`state` with its action head's bias set to `value`: weights no one else would write."""
    marked = {k: v.clone() for k, v in state.items()}
    marked["action_head.linear.bias"] = torch.full_like(marked["action_head.linear.bias"], value)
    return marked


def _learner_checkpoint(model, policy_id: int) -> dict:
    store = CheckpointStore(model.runner.exp.checkpoint_dir(policy_id))
    state, _ = store.load_latest()
    return state["model"]


@pytest.mark.timeout(240)
def test_a_conv_model_takes_new_weights_through_shared_memory(tmp_path):
    # A whole Atari state dict (~7 MB) once overflowed the learner's 1 MiB inbox (queue.Full).
    with APPO(
        "atari_breakout",
        num_workers=1,
        num_envs_per_worker=8,
        seed=1,
        train_dir=str(tmp_path),
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
    ) as model:
        model.train(4_000)
        new = _marked(model.get_parameters()[0], 0.25)
        assert sum(v.numel() * v.element_size() for v in new.values()) > 4 << 20
        model.set_parameters({0: new})
        saved = _learner_checkpoint(model, 0)  # written by the learner after it loaded them
        for key, tensor in new.items():
            assert torch.equal(saved[key], tensor), key


@pytest.mark.timeout(240)
def test_each_policy_of_a_population_takes_its_own_new_weights(tmp_path):
    with APPO(
        "CartPole-v1",
        num_policies=2,
        num_workers=2,
        num_envs_per_worker=8,
        seed=1,
        train_dir=str(tmp_path),
        report_every_sec=60,
        tensorboard=False,
        device="cpu",
    ) as model:
        model.train(4_000)
        params = model.get_parameters()
        new = {0: _marked(params[0], 1.5), 1: _marked(params[1], -2.5)}
        model.set_parameters(new)
        for p in (0, 1):
            saved = _learner_checkpoint(model, p)
            assert torch.equal(
                saved["action_head.linear.bias"], new[p]["action_head.linear.bias"]
            ), p
        model.train(2_000)  # and training goes on from them
