"""MuJoCo continuous-control tasks: which Gymnasium ids they are, and a training preset.

Responsibility: list the Gymnasium MuJoCo ``-v5`` ids (they resolve through the registry like
any Gymnasium id, once ``pip install 'sampleforge[mujoco]'`` has installed mujoco) and provide
:func:`mujoco_preset`, config overrides for on-policy continuous control.

It must not: import mujoco or ``sampleforge.config`` (envs are a foundation layer; the preset is
plain data whose keys are ``Config`` field names), wrap the tasks, or register names of its own.

Frame counting: these ids repeat each action inside the simulator (``frame_skip`` physics steps,
e.g. 4 for Hopper), but MuJoCo results are customarily reported in agent steps, so the registry
counts one env step per action here (frameskip 1), unlike Atari and Doom.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'sampleforge[mujoco]'"

MUJOCO_TASKS: tuple[str, ...] = (
    "Hopper-v5",
    "HalfCheetah-v5",
    "Walker2d-v5",
    "Ant-v5",
    "Humanoid-v5",
    "InvertedPendulum-v5",
    "InvertedDoublePendulum-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Pusher-v5",
)


def mujoco_preset() -> dict[str, object]:
    """Config overrides for the MuJoCo tasks: ``make_config(env="Hopper-v5", **mujoco_preset())``.

    The usual PPO recipe for these tasks (CleanRL's ``ppo_continuous_action.py``): GAE
    instead of V-trace, 10 epochs of 32 minibatches of 64 samples over 2048-sample datasets
    (64-step trajectories), lr 3e-4 decaying linearly, clip 0.2, gradient norm 0.5, no entropy
    bonus, separate small tanh MLPs for actor and critic, normalised observations. Rewards of a
    few units per step are scaled by 0.1; the continuous family replaces that with running
    return normalisation. Budget: the customary 1M agent steps.

    The 320 SGD steps per dataset are the recipe's own policy lag (about 160 on average, as in
    any PPO with these epochs), so stale samples are dropped only beyond 1000 SGD steps. With
    2 minibatches of 1024 instead, HalfCheetah-v5 reached 1164 at 1M steps against 1710
    (docs/benchmarks.md).
    """
    return {
        "with_vtrace": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "rollout": 64,
        "batch_size": 64,
        "num_batches_per_epoch": 32,
        "max_policy_lag": 1000,
        "num_epochs": 10,
        "learning_rate": 3e-4,
        "lr_schedule": "linear",
        "ppo_clip_ratio": 0.2,
        "max_grad_norm": 0.5,
        "entropy_coeff": 0.0,
        "value_loss_coeff": 0.5,
        "normalize_advantages": True,
        "normalize_obs": True,
        "reward_scale": 0.1,
        "encoder": "mlp",
        "activation": "tanh",
        "mlp_hidden_sizes": (64, 64),
        "rnn": "none",
        "shared_weights": False,  # separate actor and critic MLPs, as usual for these tasks
        "train_for_env_steps": 1_000_000,
        "num_envs_per_worker": 16,  # 10 epochs per dataset: more envs in flight, more lag
    }
