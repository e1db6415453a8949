"""The memory estimate counts what the buffers really allocate, and a run that cannot fit is
refused with a one-line ConfigError before anything is allocated."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sampleforge.buffers.replay import ReplayBuffer, estimate_replay_bytes
from sampleforge.buffers.shared_weights import SharedPolicyWeights, model_numel
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer
from sampleforge.components import memory_estimate, wiring
from sampleforge.components.memory_estimate import check_memory, estimate_memory
from sampleforge.components.runner import Runner
from sampleforge.config import ConfigError, make_config
from sampleforge.envs.registry import env_info
from sampleforge.learners.actor_critic import ActorCriticLearner
from sampleforge.learners.batcher import Batcher, Dataset, Samples
from sampleforge.models.factory import make_actor_critic

CPU = torch.device("cpu")
SMALL = dict(
    env="CartPole-v1", num_workers=2, num_envs_per_worker=4, rollout=8, batch_size=32, device="cpu"
)


def _layout(cfg):
    env = env_info(cfg.env)
    probe = make_actor_critic(cfg, env.observation_space, env.action_space)
    return env, probe, wiring.trajectory_layout(cfg, env, probe.rnn_state_size)


def _nbytes(data: Dataset | Samples) -> int:
    tensors = list(data.obs.values())
    tensors += [v for k, v in vars(data).items() if k != "obs"]
    return sum(t.nbytes for t in tensors)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # single-sample minibatches (APPO with GAE)
        {"with_vtrace": True},  # trajectory minibatches
        {"rnn": "gru", "rnn_size": 16, "num_batches_per_epoch": 3},
        {"env": "duel", "num_policies": 2, "num_frozen_opponents": 1},  # two seats, two learners
    ],
)
def test_the_estimate_counts_the_bytes_the_buffers_and_the_learner_allocate(overrides):
    cfg = make_config(**{**SMALL, "with_vtrace": False, **overrides})
    env, probe, layout = _layout(cfg)
    estimate = estimate_memory(cfg, layout, model_numel(probe), CPU)

    buffer = SharedTrajectoryBuffer(layout)
    assert estimate.trajectory_buffer == sum(t.nbytes for t in buffer.fields().values())

    # Slots are only needed to release copied ones; nothing is copied here.
    batcher = Batcher(buffer, None, cfg.dataset_size // cfg.rollout, CPU)
    staging = sum(t.nbytes for t in batcher.staging_tensors())
    for tensor in batcher.staging_tensors():
        tensor.zero_()  # valid actions and versions instead of the poison
    learner = ActorCriticLearner(cfg, env.observation_space, env.action_space, CPU)
    data = batcher.take()
    if learner.trains_on_samples:
        samples = learner._prepare_samples(data)
        copies = _nbytes(samples) + _nbytes(samples.take(torch.arange(cfg.batch_size)))
    else:
        copies = _nbytes(data.select(torch.arange(cfg.batch_size // cfg.rollout)))
    assert estimate.learner_datasets == cfg.num_policies * (staging + copies)

    published = SharedPolicyWeights(model_numel(probe))
    copies_of_weights = 2 * cfg.num_policies + cfg.num_frozen_opponents
    assert estimate.weights == copies_of_weights * (published.flat.nbytes + published.exact.nbytes)


def test_a_batch_size_beyond_this_machines_memory_is_refused_in_one_line():
    cfg = make_config(**{**SMALL, "batch_size": 8 * 10**12})  # ~ 10**15 bytes of datasets
    _, probe, layout = _layout(cfg)
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, layout, model_numel(probe), CPU)
    message = str(err.value)
    assert "\n" not in message
    assert "batch_size 8000000000000 x num_batches_per_epoch 4" in message
    assert "of host memory (" in message and "available)" in message
    assert "lower batch_size or num_batches_per_epoch" in message


def test_the_message_gives_the_estimate_and_the_available_memory(monkeypatch):
    cfg = make_config(**SMALL)
    _, probe, layout = _layout(cfg)
    estimate = estimate_memory(cfg, layout, model_numel(probe), CPU)
    monkeypatch.setattr(memory_estimate, "available_host_memory", lambda: estimate.host - 1)
    monkeypatch.setattr(memory_estimate, "free_shared_memory", lambda: 1000)
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, layout, model_numel(probe), CPU)
    assert err.value.problems == [
        f"the run needs at least {memory_estimate._size(estimate.host)} of host memory "
        f"({memory_estimate._size(estimate.host - 1)} available) and "
        f"{memory_estimate._size(estimate.shared)} of shared memory in /dev/shm (1 kB free): "
        "datasets of batch_size 32 x num_batches_per_epoch 4 for 1 policy take "
        f"{memory_estimate._size(estimate.dataset_slots + estimate.learner_datasets)}, "
        "sampling slots of num_workers 2 x num_envs_per_worker 4 x rollout 8 take "
        f"{memory_estimate._size(estimate.sampling_slots)}; lower batch_size or "
        "num_batches_per_epoch"
    ]


def test_a_cuda_learners_datasets_count_against_the_devices_memory(monkeypatch):
    cfg = make_config(**SMALL)
    _, probe, layout = _layout(cfg)
    on_cuda = estimate_memory(cfg, layout, model_numel(probe), torch.device("cuda"))
    on_cpu = estimate_memory(cfg, layout, model_numel(probe), CPU)
    assert on_cuda.host == on_cuda.shared == on_cuda.trajectory_buffer
    assert on_cuda.device == on_cpu.learner_datasets + on_cpu.weights
    assert on_cpu.device == 0
    monkeypatch.setattr(memory_estimate, "free_device_memory", lambda device: 100)
    with pytest.raises(ConfigError, match=r"of cuda memory \(1 kB free\)"):
        check_memory(cfg, layout, model_numel(probe), torch.device("cuda"))


def test_a_run_that_cannot_fit_is_refused_before_its_folder_or_buffers_exist(tmp_path, monkeypatch):
    cfg = make_config(train_dir=str(tmp_path), **SMALL)
    monkeypatch.setattr(memory_estimate, "available_host_memory", lambda: 1000)
    allocated = []
    monkeypatch.setattr(wiring, "SharedTrajectoryBuffer", allocated.append)
    with pytest.raises(ConfigError, match="of host memory"):
        Runner(cfg)
    assert allocated == []
    assert list(tmp_path.iterdir()) == []  # no experiment folder, no lock file


def test_a_replay_beyond_this_machines_memory_is_refused_in_one_line():
    """Atari frames: 10^10 transitions of a compressed replay cannot fit anywhere."""
    cfg = make_config(
        env="atari_pong", algorithm="dqn", replay_size=10**10, num_workers=1, device="cpu"
    )
    env = env_info(cfg.env)
    layout = wiring.trajectory_layout(cfg, env, 0)
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, layout, (1000, 0), CPU)
    message = str(err.value)
    assert "\n" not in message
    assert "replays of replay_size 10,000,000,000 for 1 policy take" in message
    assert "of host memory (" in message and "lower replay_size" in message


def test_a_replay_too_small_for_its_streams_is_refused_before_the_run_folder_exists(tmp_path):
    # 4 envs, each with its own stream of transitions: 3 cannot hold n_step + 2 = 3 apiece.
    cfg = make_config(
        env="Pendulum-v1", algorithm="sac", replay_size=11, train_dir=str(tmp_path), device="cpu"
    )
    assert cfg.num_workers * cfg.num_envs_per_worker == 4 and cfg.n_step == 1
    with pytest.raises(ConfigError) as err:
        Runner(cfg)
    assert str(err.value) == (
        "invalid config: replay_size 11 is too small for 4 streams (one per env and agent): "
        "each needs n_step + 2 = 3 transitions of it, so at least 12"
    )
    assert list(tmp_path.iterdir()) == []
    Runner(dataclasses.replace(cfg, replay_size=12)).close()  # the least allowed


def test_an_atari_replay_is_priced_as_the_frame_stacks_its_env_makes():
    cfg = make_config(env="atari_pong", algorithm="dqn", num_workers=1, device="cpu")
    layout = wiring.trajectory_layout(cfg, env_info(cfg.env), 0)
    assert layout.frame_stacked_keys == ("obs",)
    sizes = dict(
        capacity=cfg.replay_size,
        num_streams=cfg.worker_num_splits * layout.rows_per_slot,
        obs_specs=layout.obs_specs,
        action_spec=layout.action_spec,
        n_step=cfg.n_step,
    )
    stacked = estimate_replay_bytes(**sizes, stacked_keys=["obs"])
    assert estimate_memory(cfg, layout, (1000, 0), CPU).learner_datasets == stacked
    # Taken as whole 4 x 84 x 84 images, a frame each, the estimate prices 4x the pixels.
    assert estimate_replay_bytes(**sizes) > 2 * stacked


def test_the_replay_counts_as_the_value_learners_staging():
    cfg = make_config(**{**SMALL, "algorithm": "dqn", "replay_size": 50_000})
    env = env_info(cfg.env)
    layout = wiring.trajectory_layout(cfg, env, 0)
    estimate = estimate_memory(cfg, layout, (1000, 0), CPU)
    replay = ReplayBuffer(
        capacity=cfg.replay_size,
        num_streams=cfg.num_workers * cfg.worker_num_splits * layout.rows_per_slot,
        obs_specs=layout.obs_specs,
        action_spec=layout.action_spec,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
    )
    assert estimate.learner_datasets == estimate_replay_bytes(
        capacity=cfg.replay_size,
        num_streams=replay.num_streams,
        obs_specs=layout.obs_specs,
        action_spec=layout.action_spec,
        n_step=cfg.n_step,
    )
    # Vector observations are stored raw: the estimate is what the full replay allocates.
    assert estimate.learner_datasets >= replay.nbytes()
