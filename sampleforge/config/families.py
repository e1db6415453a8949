"""Environment families and the settings each one needs to learn well.

`sampleforge train --env atari_breakout` must learn Breakout without the user knowing which of
sixty settings matter. The env name decides the family; the family's settings fill in what the
user did not give (a preset and explicit flags both win over them), and `config.json` records
which values came from the family.

Families:

- ``atari``: the ``atari_*`` games (DeepMind preprocessing, clipped rewards). The PPO recipe
  that Sample Factory's Atari example and CleanRL's ``ppo_atari`` share (128-step rollouts,
  minibatches of 256, GAE, lr 2.5e-4 decaying linearly, entropy 0.01, clip 0.1, ReLU, gradient
  norm 0.5, the DQN Nature conv network, and per-pixel input normalisation as Sample Factory's
  `normalize_input`: on Breakout it more than doubled the return at 220k frames, 4.9 against
  2.1), with 1 epoch over each 1,024 samples at lr 5e-4 instead of 4 epochs at 2.5e-4: chosen
  for wall time to a score, see the comment at the settings; and Sample Factory's
  initialisation with CleanRL's policy head (`init_scheme` unit_uniform), which learns Breakout
  in fewer frames than CleanRL's and Pong as soon.
- ``doom``: the ``doom_*`` scenarios (pixels, large shaped rewards).
- ``continuous``: Box actions, vector observations: MuJoCo and the continuous classic-control
  and Box2D tasks. The usual PPO recipe for them (`sampleforge.envs.mujoco.mujoco_preset`).
- ``vector``: discrete actions, vector observations: classic control and Box2D. PPO with GAE,
  4 epochs, lr 1e-3, entropy 0.01, clip 0.2 on the defaults' samplers.

Every family normalises returns (`normalize_returns`), so no task needs a hand-picked
`reward_scale`. Envs outside these families (third-party ``module:EnvId`` names, EnvPool,
PettingZoo, the built-in duel) get the plain defaults.

Must not: import torch or build environments beyond a one-off Gymnasium probe of a
classic-control or Box2D id's spaces (cached).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sampleforge.config.schema import available_cores

FAMILY_NAMES = ("atari", "doom", "continuous", "vector")


def env_family(env: str) -> str | None:
    """The family of env name `env` (one of FAMILY_NAMES), or None for other envs."""
    if env.startswith("atari_"):
        return "atari"
    if env.startswith("doom_"):
        return "doom"
    if ":" in env:  # module:EnvId, envpool:..., pettingzoo:...: not known before import
        return None
    return _gymnasium_family(env)


def family_settings(family: str) -> dict[str, Any]:
    """The settings of `family` (one of FAMILY_NAMES)."""
    if family == "continuous":
        from sampleforge.envs.mujoco import mujoco_preset

        return {**mujoco_preset(), **_RETURN_NORMALISATION}
    settings = {**_FAMILIES[family], **_RETURN_NORMALISATION}
    if family == "atari":
        settings["num_workers"] = conv_on_cpu_workers()
    return settings


def conv_on_cpu_workers() -> int:
    """Rollout workers for a conv policy trained on the CPU: half the cores, at least one.

    Per sample on atari_breakout the learner costs about as much as env step and inference
    together (830 vs 500 + 330 us on one core, one SGD pass), so half the machine goes to the
    learner; more rollout processes only contend for it.
    """
    return max(1, available_cores() // 2)


# Value targets in units of their running statistics instead of a per-task reward_scale.
_RETURN_NORMALISATION = {"normalize_returns": True, "reward_scale": 1.0}

_FAMILIES: dict[str, dict[str, Any]] = {
    # One worker x 16 envs in two splits of 8: each split's 8 x 128-step trajectories are one
    # 1,024-sample dataset, so back-pressure can hold sampling to what the learner needs.
    # Epochs per dataset, atari_breakout seed 2 on 2 cores (2026-11-25), time to a mean return
    # of 20: 4 (the recipe's): 1.74M frames, 17.0 min at 1,724 frames/s, learner-bound;
    # 2: 1.74M frames, 9.4 min at 3,109; 1: 2.46M frames, 9.8 min at 4,217, sampler-bound.
    # One epoch at twice the lr gets the frames back (2026-11-26, seeds 1-3): 20 at 1.55M-1.67M
    # frames in 5.5-6.0 min at 4,700-4,830 frames/s, where 2 epochs at 2.5e-4 took 1.58M-1.85M
    # frames and 8.6-10.6 min; seeds 1-3 to 10M frames: 285.5, 121.9, 247.7 in 34-40 min,
    # where 2 epochs made 124.5-161.4 in 51-57 min (docs/benchmarks.md).
    # Sample Factory's initialisation (`init_scheme` unit: orthogonal gain 1 everywhere, so the
    # first policy is far from uniform) instead of CleanRL's (2026-11-27, seeds 1-3): 10 at
    # 0.57M-0.93M frames, 20 at 1.02M, 1.30M and 1.93M, 25 at 1.60M-1.87M (seeds 1-2), against
    # 0.81M-1.01M, 1.55M-1.79M and 2.24M-2.52M; Sample Factory's own seeds 1-2 on 2 cores:
    # 0.47M/0.43M, 1.31M/1.50M and 2.0M/1.82M. To 10M frames (seeds 1-3): 60 at 1.94M, 4.89M
    # and 2.93M, 100 at 3.62M, 7.00M and 4.09M, against 4.55M-5.27M and 6.17M-8.78M with
    # CleanRL's; at 10M 263.1, 178.5 and 185.3, where CleanRL's made 285.5, 121.9 and 247.7
    # (docs/benchmarks.md). Pong pays for it: seeds 1-3 reach 10 at 2.88M, 2.32M and 3.62M
    # frames and end at 20.51, 19.13 and 18.16, where CleanRL's made 2.26M, 1.80M and 2.15M and
    # 20.89, 20.52 and 19.35. `unit_uniform` (unit, with the policy head at 0.01 as CleanRL's,
    # so the first policy is uniform; 2026-11-27) keeps Breakout's early frames and gives Pong
    # back most of its own: Breakout seeds 1-3 reach 10 at 0.60M, 0.63M and 0.64M and 20 at
    # 1.24M, 1.34M and 1.57M (unit: 0.57M-0.93M and 1.02M-1.93M); Pong seeds 1-3 reach 10 at
    # 2.76M, 1.92M and 2.23M (unit: 2.88M, 2.32M and 3.62M; CleanRL's: 2.26M, 1.80M and 2.15M).
    # To 10M frames, Breakout seeds 1-3 ended at 337.9, 274.9 and 320.1 (unit: 263.1, 178.5,
    # 185.3; CleanRL's: 285.5, 121.9, 247.7) and Pong seed 1 at 20.36 (unit: 20.51, CleanRL's:
    # 20.89). On Breakout seed 1 with it, lr 1e-3 leaves 10 at 0.60M frames, as do 8
    # minibatches of 128 in one epoch (0.63M); 2 epochs reach it at 0.48M-0.52M, but 20 in 12.7
    # minutes at 1,650 frames/s where lr 1e-3 took 9.3 at 2,160 (one session). So 2 epochs for
    # the first 1M frames only (`early_num_epochs`, 2026-11-28, seeds 1-3 in one session,
    # interleaved with the family without them): 10 at 0.46M, 0.44M and 0.49M frames (without:
    # 0.71M, 0.72M, 0.63M), 20 at 1.20M, 1.19M and 1.19M (1.70M, 1.61M, 1.67M), in the same
    # minutes (20 in 4.8-5.2 against 4.6-5.2): the learner-bound stretch is short. Pong seeds
    # 1-3 with them: 10 at 1.97M, 1.34M and 1.85M frames (without: 2.76M, 1.92M, 2.23M), and
    # 20.62, 19.90 and 20.25 at 10M frames. Breakout seeds 1-3 with them to 10M frames: 274.7,
    # 274.1 and 258.8 (without, on a slower machine: 337.9, 274.9, 320.1), 20 in 4.5-5.5 minutes
    # where Sample Factory's example took 26.5 on the same machine.
    "atari": {
        "rollout": 128,
        "batch_size": 256,
        "num_batches_per_epoch": 4,
        "num_epochs": 1,
        "early_num_epochs": 2,
        "early_env_steps": 1_000_000,
        "learning_rate": 5e-4,
        "lr_schedule": "linear",
        "adam_eps": 1e-5,
        "with_vtrace": False,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "ppo_clip_ratio": 0.1,
        "value_loss_coeff": 0.5,
        "entropy_coeff": 0.01,
        "max_grad_norm": 0.5,
        "activation": "relu",
        "encoder": "conv_nature",
        "normalize_pixels": True,
        "init_scheme": "unit_uniform",
        "num_envs_per_worker": 16,
        "learner_torch_threads": "auto",
    },
    # VizDoom from pixels (tests/learning/test_doom_learns.py, docs/benchmarks.md): ELU and a
    # GRU core as in the paper; the CPU learner is the bottleneck, so one epoch of 4 minibatches
    # of 256 rather than the paper's one step of 2,048, and a GRU of 256 rather than 512.
    # defend_the_center (seed 1), mean return at ~3M frames:
    # - lr 5e-4, 8 x 128, entropy 0.003, no core: 5, the entropy collapsed to ~0.007;
    # - entropy 0.01: peaked at 13.3, then one update with a policy loss of 3.0 (the huge ratio
    #   of a stale sample on a negative advantage) collapsed it; the dual clip bounds that;
    # - lr 2.5e-4, 4 x 256, entropy 0.01, dual clip 3: 12, then a plateau at 13-14 to 8M;
    # - the same with the GRU, lr constant: 15 at 3.31M, then a plateau at 11-15 to 10M (best
    #   15.6); seed 2: 17.33 (Sample Factory's course run at 9.6M) at 2.73M, best 18.46;
    #   health_gathering: the ceiling, 2,100, at 4.1M frames, then a median of 1,565 over 8-10M.
    # - lr linear to 0 at the budget, entropy 0.005 (2026-11-26, seed 1, 10M frames): DTC median
    #   16.1 over 3-6M frames (12.5 before); health_gathering 2,000 at 2.67M frames (3.52M) and
    #   a median of 1,810 over 8-10M. The linear schedule alone held 1,862 there. But DTC seed 2
    #   stuck at 5-10 (median 7.9 over 3-6M, best 10.2), its entropy at 0.28 by 3M frames.
    # - lr linear, entropy 0.01 (the family now, 2026-11-26, DTC seeds 1-3): 3-6M medians of
    #   12.6, 15.5 and 12.4, 8-10M 11.7, 13.9 and 12.1; health_gathering seeds 1-2: 2,000 at
    #   4.52M and 4.20M frames, 1,862 and 2,002 over 8-10M; seed 3 never found the medkits
    #   (entropy 0.07 by 5M frames, return 285 to 10M).
    # - the symmetric KL to uniform in place of the entropy bonus, at 0.01 (Sample Factory's Doom
    #   exploration loss; 2026-11-28, one run each): health_gathering seed 3 reached 2,000 at
    #   4.68M frames, but seed 1 collapsed at ~320 by 3M; DTC seed 3 made 11.2 over 3-6M frames
    #   (12.4 with the bonus). Kept the bonus. What health_gathering lacked was its health in
    #   the observation (envs/doom/scenarios.py): with it seeds 1-3 reach 2,000 by 0.9M frames.
    #   DTC observing its ammunition and health, seeds 1-3 (5M-frame budget): 17.33 at 1.41-2.25M
    #   frames, medians of 17.7-20.7 over 3-5M.
    "doom": {
        "activation": "elu",
        "rnn": "gru",
        "rnn_size": 256,
        "learning_rate": 2.5e-4,
        "lr_schedule": "linear",
        "batch_size": 256,
        "num_batches_per_epoch": 4,
        "num_epochs": 1,
        "entropy_coeff": 0.01,
        "ppo_dual_clip": 3.0,
        "num_envs_per_worker": 8,
        "learner_torch_threads": "auto",
    },
    # Classic control and Box2D with discrete actions: the defaults' 2 workers x 48 envs and
    # rollout 32, with PPO's usual GAE, 4 epochs, entropy 0.01, clip 0.2 and gradient norm 0.5
    # at lr 1e-3, and return normalisation. Seeds 1-3 on 2 cores (2026-11-25/26): CartPole-v1
    # 475 at 106k-164k steps (9-11 s), Acrobot-v1 -100 at 55k-68k (8-9 s), LunarLander-v3 200
    # at 0.49M-1.89M (40-122 s). The schema's defaults alone (CartPole-tuned: V-trace, one
    # epoch, lr 2e-3, reward scale 0.1) reach only 71 on LunarLander by 2M steps (48 with
    # return normalisation); 2 minibatches of 1,024 solved LunarLander at 1.67M but not CartPole.
    "vector": {
        "with_vtrace": False,
        "gae_lambda": 0.95,
        "num_epochs": 4,
        "learning_rate": 1e-3,
        "entropy_coeff": 0.01,
        "ppo_clip_ratio": 0.2,
        "max_grad_norm": 0.5,
    },
}


@lru_cache(maxsize=64)
def _gymnasium_family(env_id: str) -> str | None:
    """continuous or vector for Gymnasium's MuJoCo, classic-control and Box2D ids."""
    import gymnasium as gym

    spec = gym.envs.registry.get(env_id)
    if spec is None:
        return None
    entry_point = str(spec.entry_point)
    if "mujoco" in entry_point:
        return "continuous"
    if "classic_control" not in entry_point and "box2d" not in entry_point:
        return None
    try:
        env = gym.make(env_id)
    except Exception:  # noqa: BLE001 - e.g. Box2D not installed: the env itself will say so
        return None
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
        return None  # pixels (CarRacing)
    return "continuous" if isinstance(act, gym.spaces.Box) else "vector"
