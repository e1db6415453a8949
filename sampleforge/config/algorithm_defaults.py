"""The settings each replay or PQN algorithm brings, alone and per env family.

`--algorithm rainbow` is DQN with the Rainbow components switched on; `--algorithm qrdqn` the
quantile head; `--algorithm td3` a deterministic actor with twin critics and delayed updates;
and so on: an algorithm name is a bundle of its family's settings (`algo/value_settings.py`,
`algo/continuous_settings.py`). On top of it, each env family gets the family's recipe that
learns there (the actor-critic recipes of `config/families.py` do not apply to these runs).
These settings fill the same layer as the env family's (``family`` in `config/sources.py`):
a preset and explicit settings win over them, and `config.json` records where each came from.

Must not: import torch or build environments.
"""

from __future__ import annotations

from typing import Any

# Each algorithm as a combination of the family's components.
ALGORITHM_SETTINGS: dict[str, dict[str, Any]] = {
    "dqn": {},
    # Hessel et al. 2018: double Q, PER, dueling, 3-step returns, C51, noisy nets.
    "rainbow": {
        "q_head": "categorical",
        "double_q": True,
        "dueling": True,
        "noisy": True,
        "n_step": 3,
        "prioritized_replay": True,
        "priority_alpha": 0.5,
    },
    "qrdqn": {"q_head": "quantile"},
    # IQN: N = N' = 64 sampled fractions for the loss (Dabney et al. 2018b).
    "iqn": {"q_head": "implicit_quantile", "num_quantiles": 64},
    "fqf": {"q_head": "fqf", "num_quantiles": 32, "num_fractions": 32},
    # Munchausen DQN's soft bootstrap replaces double Q (Vieillard et al. 2020); its target is
    # one-step (the log-policy bonus of the steps between is not stored), whatever the family's.
    "mdqn": {"munchausen": True, "double_q": False, "n_step": 1},
    # PQN: Q(lambda) on fresh rollouts, LayerNorm, no replay and no target (Gallici et al.).
    "pqn": {"layer_norm": True, "double_q": False},
}

# The value-based recipe of each env family (env families: config/families.py).
VALUE_FAMILY_SETTINGS: dict[str, dict[str, Any]] = {
    # Classic control and Box2D. RL Zoo's CartPole-v1 DQN recipe (lr 2.3e-3, 32 samples per
    # insert, epsilon 1 -> 0.04 over 16K steps, grad norm 10) with four changes: LayerNorm in
    # the MLP (without it the greedy score collapsed after ~20K steps on 1 seed in 4, still
    # under 475 at 71K), 3-step returns, batches of 256 (4x fewer updates for the same
    # samples; the target copied every 32 of them, Zoo's 8,192 samples) and a 128 x 128 MLP.
    # A value-based method deploys its greedy policy, so the run stops on greedy evaluations
    # (10 episodes every 10K steps) reaching stop_at_mean_return. CartPole-v1, greedy mean of
    # 10 episodes every 5K steps, 2 cores: DQN first at 500 at 10-46K env steps (seeds 1-6),
    # Rainbow at 5-36K (seeds 1-6); Zoo's recipe as it was: 49.6K on seed 1, swinging between
    # 16 and 500 from one evaluation to the next (docs/off_policy.md has the figures and the
    # command).
    "vector": {
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 16,
        "learning_rate": 2.3e-3,
        "batch_size": 256,
        "replay_size": 100_000,
        "learning_starts": 1_000,
        "samples_per_insert": 32.0,
        "target_update_period": 32,
        "n_step": 3,
        "activation": "relu",
        "exploration_env_steps": 16_000,
        "epsilon_end": 0.04,
        "mlp_hidden_sizes": [128, 128],
        "layer_norm": True,
        "max_grad_norm": 10.0,
        "reward_scale": 1.0,
        "eval_every_env_steps": 10_000,
        "stop_on": "evaluation",
        "v_min": -100.0,
        "v_max": 100.0,
        "num_atoms": 101,
        # QR-DQN's quantiles (IQN and FQF bring their own): the loss compares every pair, so
        # 200 (the Atari paper's) cost 16 times 50's per sample; RL Zoo uses 10-170 here.
        "num_quantiles": 50,
    },
    # The atari_* games (rewards already clipped to their sign by the env). Dopamine's Rainbow
    # recipe (Hessel et al. 2018; Castro et al. 2018) for the update: Adam's eps 1.5e-4, batches
    # of 32, one update every 4 agent steps (8 samples per insert), C51's support of 51 atoms on
    # [-10, 10], the Nature network; with RL Zoo's Atari DQN replay (100K transitions, lr 1e-4)
    # and the target copied every 1,000 updates, learning after 10K steps. On Pong (seed 1, same
    # code and work per frame) this reached -0.4 at 3.06M frames where Dopamine's own (a 1M
    # replay from 20K steps, lr 6.25e-5, the target every 2,000 updates) was at -19.5
    # (docs/off_policy.md).
    "atari": {
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "learning_rate": 1e-4,
        "adam_eps": 1.5e-4,
        "batch_size": 32,
        "replay_size": 100_000,
        "learning_starts": 10_000,
        "samples_per_insert": 8.0,
        "target_update_period": 1_000,
        "exploration_env_steps": 250_000,
        "epsilon_end": 0.01,
        "max_grad_norm": 10.0,
        "gamma": 0.99,
        "reward_scale": 1.0,
        "num_atoms": 51,
        "v_min": -10.0,
        "v_max": 10.0,
        "activation": "relu",
        "encoder": "conv_nature",
        "normalize_pixels": False,
        "learner_torch_threads": "auto",
    },
}


# PQN samples a whole dataset ahead of its learner (learners/pqn_learner.py), and its targets
# come from the current network, so old steps cost it little: the actor-critic's bound of 100
# SGD steps dropped 11-23% of some datasets of the paper's Atari recipe (64 SGD steps a
# dataset, lags up to 107; docs/off_policy.md). This bound only drops what a stalled learner
# left behind.
PQN_MAX_POLICY_LAG = 1000

# PQN's recipe per env family: it samples and trains as an on-policy learner (datasets of fresh
# rollouts, epochs of minibatches), so it shares none of the replay recipes above.
PQN_FAMILY_SETTINGS: dict[str, dict[str, Any]] = {
    # Classic control and Box2D: CleanRL's pqn.py recipe for CartPole-v1 (4 epochs of 4
    # minibatches per 512-step dataset, lambda 0.65, RAdam with the lr decayed linearly,
    # gradient norm 10, raw rewards, a LayerNorm MLP) on 16 envs, with lr 1e-3 (not 2.5e-4)
    # and epsilon annealed over 50k steps (not 250k): CartPole solved at 102k-204k env steps
    # (seeds 1-3, 2 cores), 306k at lr 2.5e-4 with a 100k-step anneal. Fewer SGD steps per
    # sample (2 epochs, or minibatches of 256 on 32 envs) cost more env steps (296k-500k+)
    # than they save learner time.
    "vector": {
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 128,
        "num_batches_per_epoch": 4,
        "num_epochs": 4,
        "learning_rate": 1e-3,
        "lr_schedule": "linear",
        "q_lambda": 0.65,
        "exploration_env_steps": 50_000,
        "epsilon_end": 0.05,
        "mlp_hidden_sizes": [128, 128],
        "max_grad_norm": 10.0,
        "reward_scale": 1.0,
        "max_policy_lag": PQN_MAX_POLICY_LAG,
    },
    # The atari_* games: the paper's Atari recipe (purejaxql's pqn_atari.yaml, Gallici et al.
    # 2024): 128 envs x 32 steps, in two splits, per 4,096-sample dataset, 2 epochs of 32
    # minibatches of 128 (16 SGD steps per 1,024 samples), RAdam at a constant lr 2.5e-4;
    # epsilon to 0.01 over 1M frames (a tenth of a 10M-frame budget), lambda 0.65, LayerNorm
    # after every conv and linear layer of the Nature network, pixels / 255. Seed 1, 10M
    # frames, 2 cores (docs/off_policy.md): Breakout 150 (100 at 8.6M frames) where CleanRL's
    # 8 envs x 128 steps with the same minibatches reached 79; Pong 16.9 against 15.9, at 1.7x
    # the frames per second (inference batches of 64 envs, not 8).
    "atari": {
        "num_envs_per_worker": 128,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 128,
        "num_batches_per_epoch": 32,
        "num_epochs": 2,
        "learning_rate": 2.5e-4,
        "lr_schedule": "constant",
        "q_lambda": 0.65,
        "exploration_env_steps": 1_000_000,
        "epsilon_end": 0.01,
        "max_grad_norm": 10.0,
        "gamma": 0.99,
        "reward_scale": 1.0,
        "activation": "relu",
        "encoder": "conv_nature",
        "normalize_pixels": False,
        "learner_torch_threads": "auto",
        "max_policy_lag": PQN_MAX_POLICY_LAG,
    },
}


# Each continuous-control algorithm as a combination of its family's components.
CONTINUOUS_ALGORITHM_SETTINGS: dict[str, dict[str, Any]] = {
    # Lillicrap et al. 2016, as TD3's authors re-ran it: one critic, no smoothing or delay.
    "ddpg": {
        "actor_distribution": "deterministic",
        "num_critics": 1,
        "policy_delay": 1,
        "target_policy_noise": 0.0,
    },
    # Fujimoto et al. 2018: clipped double Q, target policy smoothing, delayed actor updates,
    # and the target critics move with the target actor, every policy_delay critic updates.
    "td3": {
        "actor_distribution": "deterministic",
        "num_critics": 2,
        "policy_delay": 2,
        "target_update_period": 2,
        "target_policy_noise": 0.2,
        "target_noise_clip": 0.5,
    },
    # Haarnoja et al. 2018b: twin critics, a squashed Gaussian, a learned temperature.
    "sac": {"actor_distribution": "squashed_gaussian", "num_critics": 2, "policy_delay": 1},
    # Bhatt et al. 2024: SAC without target networks, batch renormalisation in the critics and
    # the actor, 2,048-wide critics, Adam beta1 0.5, the actor every 3 critic updates.
    "crossq": {
        "actor_distribution": "squashed_gaussian",
        "num_critics": 2,
        "target_critics": False,
        "batch_renorm": True,
        "critic_hidden_sizes": [2048, 2048],
        "policy_delay": 3,
        "learning_rate": 1e-3,
        "actor_learning_rate": 1e-3,
        "adam_beta1": 0.5,
    },
}

# The continuous-control recipe of each env family.
CONTINUOUS_FAMILY_SETTINGS: dict[str, dict[str, Any]] = {
    # MuJoCo and the classic-control and Box2D envs with Box actions: CleanRL's SAC and TD3
    # recipe (batches of 256 at one update per transition, a 1M replay, tau 0.005, 256 x 256
    # ReLU MLPs, the critics at lr 1e-3 and the actor at 3e-4, no gradient clipping, raw
    # rewards) with the first 5K steps random, on one rollout worker's 4 envs (2 splits of 2).
    # One learner thread: on a machine of its own, two that spin (`--learner_torch_threads 2
    # --learner_threads_spin true`) train SAC 1.25x faster, but beside any other busy process
    # they wait on each other at every parallel region (13 updates a second beside a test run,
    # against 110 alone; docs/off_policy.md). `--learner_threads_adaptive true` beside them
    # keeps one thread while the machine is busy (0.99x one thread there, 1.17x when quiet).
    "continuous": {
        "num_workers": 1,
        "num_envs_per_worker": 4,
        "worker_num_splits": 2,
        "rollout": 16,
        "learning_rate": 1e-3,
        "actor_learning_rate": 3e-4,
        "batch_size": 256,
        "replay_size": 1_000_000,
        "learning_starts": 5_000,
        "random_action_steps": 5_000,
        "samples_per_insert": 256.0,
        "target_update_period": 1,
        "target_tau": 0.005,
        "gamma": 0.99,
        "n_step": 1,
        "mlp_hidden_sizes": [256, 256],
        "activation": "relu",
        "max_grad_norm": 0.0,
        "reward_scale": 1.0,
        "normalize_obs": False,
        "normalize_returns": False,
    },
}


def value_settings(algorithm: str, family: str | None) -> dict[str, Any]:
    """The settings of value-based `algorithm` on an env of `family` (None: no family)."""
    by_family = PQN_FAMILY_SETTINGS if algorithm == "pqn" else VALUE_FAMILY_SETTINGS
    env_part = by_family.get(family, {}) if family else {}
    return {**env_part, **ALGORITHM_SETTINGS[algorithm]}


def continuous_settings(algorithm: str, family: str | None) -> dict[str, Any]:
    """The settings of continuous-control `algorithm` on an env of `family`. An env of no
    family (the user's own) has Box actions like every env these algorithms take, so it gets
    the recipe of the continuous family."""
    env_part = CONTINUOUS_FAMILY_SETTINGS.get(family or "continuous", {})
    return {**env_part, **CONTINUOUS_ALGORITHM_SETTINGS[algorithm]}
