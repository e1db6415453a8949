"""Several policies on a multi-agent env: every sample reaches the learner of the policy that
acted and no other, and nothing a finished seat "does" is trained on.

Serial mode, so the test can reach into the components: each policy's inference worker is made
to stamp its own id as the action it takes, and each learner records the datasets it trains on.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sampleforge.components.runner import Runner
from sampleforge.config import make_config
from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import register_env
from sampleforge.models.actor_critic import ActOutput

NUM_POLICIES = 3
SEATS = 3
FINISH_AT = (7, 5, 3)  # seat s is done after this many steps; the episode ends at 7


class StaggeredEnv(MultiAgentEnv):
    """Observation of a seat: [seat, steps since episode start, its last action]."""

    num_agents = SEATS
    observation_space = gym.spaces.Box(-1, 100, (3,), np.float32)
    action_space = gym.spaces.Discrete(NUM_POLICIES)

    def __init__(self):
        self.t = 0
        self.last = np.full(SEATS, -1.0)

    def _obs(self):
        return [np.array([s, self.t, self.last[s]], np.float32) for s in range(SEATS)]

    def reset(self, seed=None):
        self.t = 0
        self.last[:] = -1
        return self._obs(), [{} for _ in range(SEATS)]

    def step(self, actions):
        self.t += 1
        playing = np.array([self.t <= f for f in FINISH_AT])
        self.last = np.where(playing, np.asarray(actions, np.float64), self.last)
        done = np.array([self.t >= f for f in FINISH_AT])
        rewards = playing.astype(np.float32)
        return self._obs(), rewards, done, np.zeros(SEATS, bool), [{} for _ in range(SEATS)]


def _stamp_policy_id(worker, policy_id: int) -> None:
    """The inference worker of `policy_id` acts `policy_id` for every row it serves."""

    def act(obs, rnn_states, deterministic=False, env_ids=None):
        n = rnn_states.shape[0]
        return ActOutput(
            actions=torch.full((n, 1), policy_id, dtype=torch.int64),
            log_probs=torch.zeros(n),
            values=torch.zeros(n),
            new_rnn_states=rnn_states,
        )

    worker.model.act = act


def _record_datasets(learner_worker, into: list) -> None:
    train = learner_worker.learner.train

    def recording_train(data, on_sgd_step):
        into.append(
            {
                k: v.clone()
                for k, v in (
                    ("actions", data.actions),
                    ("valids", data.valids),
                    ("policy_ids", data.policy_ids),
                    ("obs", data.obs["obs"]),
                )
            }
        )
        return train(data, on_sgd_step)

    learner_worker.learner.train = recording_train


@pytest.mark.timeout(120)
def test_each_learner_trains_only_on_samples_its_policy_acted(tmp_path):
    register_env(
        "staggered_multi_agent", lambda ctx: StaggeredEnv(), multi_agent=True, overwrite=True
    )
    cfg = make_config(
        env="staggered_multi_agent",
        train_dir=str(tmp_path),
        serial_mode=True,
        num_policies=NUM_POLICIES,
        num_workers=2,
        num_envs_per_worker=4,
        rollout=8,
        batch_size=48,
        num_batches_per_epoch=1,
        num_epochs=1,
        train_for_env_steps=6_000,
        seed=3,
        device="cpu",
        report_every_sec=60,
    )
    datasets = {p: [] for p in range(NUM_POLICIES)}
    with Runner(cfg) as runner:
        runner.start()
        components = runner.host.components
        for p in range(NUM_POLICIES):
            _stamp_policy_id(components[f"inference_worker_p{p}_0"], p)
            _record_datasets(components[f"learner_p{p}"], datasets[p])
        runner.train()

    for p, recorded in datasets.items():
        assert recorded, f"policy {p} never trained"
        valid_samples = 0
        for data in recorded:
            valid = data["valids"][:-1] > 0  # [T, B]
            valid_samples += int(valid.sum())
            # Stamped by policy p's inference worker: nobody else's actions are here.
            assert (data["actions"][:-1][valid] == p).all()
            assert (data["policy_ids"][:-1][valid] == p).all()
            # A seat that finished has no valid steps until its env's next episode.
            seat, t = data["obs"][:-1, :, 0], data["obs"][:-1, :, 1]
            finish = torch.tensor(FINISH_AT, dtype=torch.float32)[seat.long()]
            assert (t[valid] < finish[valid]).all()
            # ...and every step a seat played for p is valid (nothing of ours is thrown away).
            ours = (data["policy_ids"][:-1] == p) & (t < finish)
            assert torch.equal(ours, valid)
        assert valid_samples > 500
    # Rows changed policy at episode starts: each learner saw steps of other policies masked.
    assert any((d["policy_ids"][:-1] != p).any() for p in datasets for d in datasets[p])
