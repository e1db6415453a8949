"""Named bundles of settings that make an env family learn well: `--preset mujoco`.

A preset fills in settings the user did not give: explicit flags and keywords always win, so
`--preset atari --learning_rate 1e-4` keeps the preset's other values and your learning rate.
`config.json` records the resolved values, so a resumed run needs no preset.

Must not: know environments beyond these plain dicts (the MuJoCo recipe lives with the MuJoCo
tasks, in `sampleforge.envs.mujoco`, as data).
"""

from __future__ import annotations

from typing import Any

from sampleforge.config.schema import available_cores

PRESET_NAMES = ("mujoco", "atari", "doom", "duel")


def preset_settings(name: str) -> dict[str, Any]:
    """The settings of preset `name` (one of PRESET_NAMES)."""
    if name == "mujoco":
        from sampleforge.envs.mujoco import mujoco_preset

        return mujoco_preset()
    settings = dict(_PRESETS[name])
    if name == "atari":
        settings["num_workers"] = _conv_on_cpu_workers()
    return settings


def _conv_on_cpu_workers() -> int:
    """Rollout workers for a conv policy trained on the CPU: half the cores, at least one.

    Per sample on atari_breakout the learner costs about as much as env step and inference
    together (830 vs 500 + 330 us on one core), so half the machine goes to the learner. More
    rollout processes only contend for it: on 2 cores, 1 worker x 32 envs trained at about
    4,300 frames/s, 2 workers x 16 envs at 3,400 (docs/benchmarks.md).
    """
    return max(1, available_cores() // 2)


_PRESETS: dict[str, dict[str, Any]] = {
    # The paper's Atari setting on a CPU: one big minibatch per dataset, unscaled clipped
    # rewards (the env clips them to [-1, 1]). A conv learner on the CPU needs about half the
    # machine, so rollout workers get the other half (see `_conv_on_cpu_workers`). 64 envs per
    # worker make inference batches of 32 (two splits), which cost 265 us per sample against
    # 290 at 16, and keep the policy lag at about 2 SGD steps (0.9 with 32 envs).
    "atari": {"learning_rate": 2.5e-4, "reward_scale": 1.0, "batch_size": 1024,
              "num_epochs": 1, "num_batches_per_epoch": 1, "num_envs_per_worker": 64},
    # VizDoom from pixels (tests/learning/test_doom_learns.py): ELU as in the paper; the CPU
    # learner is the bottleneck, so smaller minibatches and one epoch.
    "doom": {"activation": "elu", "learning_rate": 5e-4, "batch_size": 128,
             "num_batches_per_epoch": 8, "num_epochs": 1, "reward_scale": 0.01,
             "num_envs_per_worker": 8, "learner_torch_threads": "auto"},
    # Self-play on the built-in duel (docs/multi_agent.md).
    "duel": {"reward_scale": 1.0, "learning_rate": 1e-3, "batch_size": 1024,
             "num_batches_per_epoch": 1, "num_epochs": 2, "num_envs_per_worker": 16},
}
