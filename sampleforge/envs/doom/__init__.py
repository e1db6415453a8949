"""VizDoom scenarios as sampleforge environments (paper section 4.3 and appendix A.3).

Responsibility: register every name of :data:`DOOM_SCENARIOS` (``doom_basic``, ...,
``doom_deathmatch_bots``) with its frameskip, and export the public Doom names. Importing this
package does not import vizdoom; building an env does, and says to run
``pip install 'sampleforge[doom]'`` when it is missing.

It must not: hold environment logic (see the modules below) or import optional dependencies.

Modules: ``scenarios.py`` (names -> .cfg files, action set, frameskip, bots, shaping),
``actions.py`` (action spaces), ``measurements.py`` (HUD vector), ``reward_shaping.py``,
``doom_env.py`` (the gymnasium.Env and ``make_doom_env``).

Not here: the two-player ``doom_duel`` (two game instances joined over UDP on the loopback
interface, advancing in lockstep, one agent per instance, as in the paper's self-play
experiment). It needs the multi-agent environment interface, which sampleforge does not have
yet; until it exists, ``doom_deathmatch_bots`` is the only opponent-based scenario.
"""

from __future__ import annotations

from functools import partial

from sampleforge.envs.doom.actions import AIM_DEGREES, HEAD_NAMES, HEAD_SIZES
from sampleforge.envs.doom.doom_env import INSTALL_HINT, DoomEnv, make_doom_env
from sampleforge.envs.doom.measurements import MEASUREMENT_NAMES
from sampleforge.envs.doom.reward_shaping import (
    DoomRewardShaping,
    DoomRewardShapingWrapper,
    shaped_reward,
    shaping_terms,
)
from sampleforge.envs.doom.scenarios import (
    DOOM_SCENARIOS,
    DoomScenario,
    UnknownDoomScenarioError,
    doom_scenario,
)
from sampleforge.envs.registry import register_env

__all__ = [
    "AIM_DEGREES",
    "DOOM_SCENARIOS",
    "HEAD_NAMES",
    "HEAD_SIZES",
    "INSTALL_HINT",
    "MEASUREMENT_NAMES",
    "DoomEnv",
    "DoomRewardShaping",
    "DoomRewardShapingWrapper",
    "DoomScenario",
    "UnknownDoomScenarioError",
    "doom_scenario",
    "make_doom_env",
    "shaped_reward",
    "shaping_terms",
]


def _register_doom_scenarios() -> None:
    # partial of a module-level function keeps factories picklable for worker processes.
    for name, scenario in DOOM_SCENARIOS.items():
        register_env(
            name,
            partial(make_doom_env, name),
            frameskip=scenario.frameskip,
            description=f"VizDoom: {scenario.description}",
        )


_register_doom_scenarios()
