"""VizDoom scenarios as sampleforge environments (paper section 4.3 and appendix A.3).

Responsibility: register every name of :data:`DOOM_SCENARIOS` (``doom_basic``, ...,
``doom_deathmatch_bots``) with its frameskip, and the two-player ``doom_duel`` as a multi-agent
env (frameskip 2), and export the public Doom names. Importing this package does not import
vizdoom; building an env does, and says to run ``pip install 'sampleforge[doom]'`` when it is
missing.

It must not: hold environment logic (see the modules below) or import optional dependencies.

Modules: ``scenarios.py`` (names -> .cfg files, action set, frameskip, bots, shaping),
``actions.py`` (action spaces), ``measurements.py`` (HUD vector), ``reward_shaping.py``,
``doom_env.py`` (the gymnasium.Env and ``make_doom_env``), ``engine_ipc.py`` (cleanup in
``/dev/shm``), and for ``doom_duel``: ``duel_env.py`` (the MultiAgentEnv), ``duel_seats.py``
(starting, talking to and stopping its seat processes) and ``duel_seat_server.py`` (the game
loop inside a seat process).

``doom_duel`` is the paper's self-play duel: two game instances joined over UDP (the joiner
connects through the loopback interface), advancing in lockstep, one agent seat per instance.
"""

from __future__ import annotations

from functools import partial

from sampleforge.envs.doom.actions import AIM_DEGREES, HEAD_NAMES, HEAD_SIZES
from sampleforge.envs.doom.doom_env import INSTALL_HINT, DoomEnv, make_doom_env
from sampleforge.envs.doom.duel_env import DoomDuelEnv, make_doom_duel
from sampleforge.envs.doom.duel_seats import (
    DoomDuelConnectionError,
    DoomDuelError,
    DoomDuelExposedError,
)
from sampleforge.envs.doom.measurements import MEASUREMENT_NAMES
from sampleforge.envs.doom.reward_shaping import (
    DoomRewardShaping,
    DoomRewardShapingWrapper,
    shaped_reward,
    shaping_terms,
)
from sampleforge.envs.doom.scenarios import (
    DEATHMATCH_FRAMESKIP,
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
    "DoomDuelConnectionError",
    "DoomDuelEnv",
    "DoomDuelError",
    "DoomDuelExposedError",
    "DoomEnv",
    "DoomRewardShaping",
    "DoomRewardShapingWrapper",
    "DoomScenario",
    "UnknownDoomScenarioError",
    "doom_scenario",
    "make_doom_duel",
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
    # Two seats, one game instance each (duel_env.py); the same frameskip as the bot deathmatch.
    register_env(
        "doom_duel",
        make_doom_duel,
        multi_agent=True,
        frameskip=DEATHMATCH_FRAMESKIP,
        description="VizDoom: two-player deathmatch on the CIG 2016 map for self-play; "
        "win = more frags",
    )


_register_doom_scenarios()
