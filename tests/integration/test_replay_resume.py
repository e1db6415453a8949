"""A replay run (value-based, continuous control) keeps its replay across a restart with
--save_replay, and says that it refills without it; counters resume either way."""

import logging

import pytest
import torch

from sampleforge.checkpoint.store import CheckpointStore
from sampleforge.components.learner_worker import STAGER_KEY
from sampleforge.components.runner import Runner
from sampleforge.config import make_config

# Each replay family on an env it acts in (SAC with small networks: seconds of training).
_RUNS = {
    "dqn": dict(env="CartPole-v1"),
    "sac": dict(
        env="Pendulum-v1", random_action_steps=500, batch_size=32, mlp_hidden_sizes=[32, 32]
    ),
}


def _cfg(tmp_path, steps, save_replay, algorithm, device="cpu"):
    return make_config(
        algorithm=algorithm,
        experiment="run",
        train_dir=str(tmp_path),
        train_for_env_steps=steps,
        num_workers=1,
        num_envs_per_worker=4,
        rollout=16,
        learning_starts=500,
        samples_per_insert=4.0,
        # 1-step: a restarted stream then drops no pending n-step window, so every transition
        # inserted before the restart is counted below.
        n_step=1,
        save_replay=save_replay,
        device=device,
        seed=5,
        report_every_sec=30,
        **_RUNS[algorithm],
    )


def _replay_in_last_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path / "run" / "checkpoints" / "p0")
    state, _ = store.load_latest(map_location=torch.device("cpu"))
    return state.get(STAGER_KEY)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "algorithm, save_replay",
    [("dqn", True), ("dqn", False), ("sac", True)],
    ids=["dqn_saved", "dqn_refilled", "sac_saved"],
)
def test_a_restart_continues_with_the_replay_only_when_it_was_saved(
    tmp_path, caplog, algorithm, save_replay
):
    with Runner(_cfg(tmp_path, 1_500, save_replay, algorithm)) as runner:
        first = runner.train()
        version = runner.progress.policy_version[0]
        size_before = runner.progress.last_stats["replay/size"]
    assert version > 0 and size_before > 0
    saved = _replay_in_last_checkpoint(tmp_path)
    assert (saved is not None) == save_replay
    if save_replay:
        # Every env fed the replay: under the ratio's back-pressure the two splits of the
        # worker took turns (rollouts of 16 steps), none stood still.
        count = saved["replay"]["count"]
        assert count.max() - count.min() <= 32, count

    caplog.set_level(logging.INFO)
    # Relative to where the first run stopped (its overshoot varies): a refilling run needs
    # its 500 transitions before it trains and reports the replay again.
    with Runner(_cfg(tmp_path, first.env_steps + 1_000, save_replay, algorithm)) as resumed:
        resumed.start()
        assert resumed.progress.policy_version[0] == version
        second = resumed.train()
        size_after = resumed.progress.last_stats["replay/size"]
    refill_said = "the checkpoint holds no replay" in caplog.text
    assert refill_said != save_replay
    trained = second.env_steps - first.env_steps
    if save_replay:
        # Everything inserted before the restart is still sampleable after it.
        assert size_after >= size_before + trained - 64
    else:
        assert size_after <= trained + 64


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.timeout(240)
def test_a_replay_saved_by_a_cuda_learner_is_resumed_by_one(tmp_path):
    """The checkpoint is loaded onto the learner's device, the replay in it too: the replay
    once failed to load there (a CUDA tensor has no numpy view), at every resume."""
    with Runner(_cfg(tmp_path, 1_500, True, "dqn", device="cuda")) as runner:
        first = runner.train()
        version = runner.progress.policy_version[0]
        size_before = runner.progress.last_stats["replay/size"]
    with Runner(_cfg(tmp_path, first.env_steps + 1_000, True, "dqn", device="cuda")) as resumed:
        resumed.start()
        assert resumed.progress.policy_version[0] == version
        second = resumed.train()
        assert resumed.progress.last_stats["replay/size"] >= size_before + (
            second.env_steps - first.env_steps - 64
        )
