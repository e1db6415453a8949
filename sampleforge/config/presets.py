"""Named bundles of settings: `--preset atari`.

The env family's settings (`config/families.py`) already apply to every env of a family; a
preset applies a family's settings to an env outside it (`--env mypkg.games:Maze-v0 --preset
atari`), or the self-play recipe to a multi-agent env. A preset fills in settings the user did
not give: explicit flags and keywords always win, so `--preset atari --learning_rate 1e-4` keeps
the preset's other values and your learning rate. `config.json` records the resolved values and
where each came from, so a resumed run needs no preset.

Must not: know environments beyond these plain dicts.
"""

from __future__ import annotations

from typing import Any

from sampleforge.config.families import family_settings

PRESET_NAMES = ("mujoco", "atari", "doom", "duel")

# Presets that are an env family's settings.
_FAMILY_OF_PRESET = {"mujoco": "continuous", "atari": "atari", "doom": "doom"}

# Self-play on the built-in duel (docs/multi_agent.md).
_DUEL = {
    "reward_scale": 1.0,
    "learning_rate": 1e-3,
    "batch_size": 1024,
    "num_batches_per_epoch": 1,
    "num_epochs": 2,
    "num_envs_per_worker": 16,
}


def preset_settings(name: str, algorithm: str = "appo") -> dict[str, Any]:
    """The settings of preset `name` (one of PRESET_NAMES) for `algorithm`: a family preset
    gives that family's recipe for the algorithm's own family (a value-based algorithm gets
    the value-based recipe, not the actor-critic one)."""
    if name in _FAMILY_OF_PRESET:
        return family_settings(_FAMILY_OF_PRESET[name], algorithm=algorithm)
    return dict(_DUEL)
