"""The VizDoom scenarios sampleforge knows by name, as plain data.

Responsibility: for each ``doom_*`` name, say which scenario files (shipped inside the
``vizdoom`` package) to load, which action set and observation layout to use, how many frames
each action is repeated (paper Table A.5: 4, or 2 for deathmatch) and the discount that goes
with each frameskip, and whether scripted bots and reward shaping are involved; look a name up
with a message that lists every known name.

It must not: import vizdoom, start games, or hold behaviour. Building the environment from a
scenario is ``doom_env.py``'s job; the action tables live in ``actions.py``.

Deathmatch map. The paper's *Deathmatch* map does not ship with vizdoom; of the multiplayer maps
that do (``cig.wad`` MAP01/MAP02, ``multi_deathmatch.wad``, ``multi_duel.wad``) only ``cig.wad``
MAP02, the full-deathmatch map of the 2016 Visual Doom AI Competition, has weapon, ammo, health
and armor pickups and no scripted loadout. So every head of the Table A.4 action space (weapon
selection, interaction) and every shaping term (pickups, weapon switching) means something
there. ``cig.wad`` MAP01 and ``multi_duel.wad`` hand out a rocket launcher only, and
``multi_deathmatch.wad`` is a small arena whose script ends the game at the first kill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sampleforge.envs.registry import UnknownEnvError

ActionSetName = Literal["cfg_buttons", "factorised"]

BASIC_FRAMESKIP = 4
DEATHMATCH_FRAMESKIP = 2
# The discount per agent step at each frameskip (paper Table A.5; the doom family applies it):
# at frameskip 2 a step is half as long, and 0.995 keeps the horizon in game time that 0.99
# gives at frameskip 4 (0.995^2 ~ 0.99).
GAMMA_AT_FRAMESKIP: dict[int, float] = {BASIC_FRAMESKIP: 0.99, DEATHMATCH_FRAMESKIP: 0.995}
# Doom runs at 35 tics per second; the paper's deathmatch matches last 4 minutes (Figure 8).
TICS_PER_SECOND = 35
DEATHMATCH_MINUTES = 4.0
DEATHMATCH_BOTS = 7  # 8 players in all, the map's and Doom's usual maximum

# Game rules for a bot match hosted by the single agent (ZDoom command-line and CVARs):
# deathmatch rules, immediate respawn with brief protection, spawn far from others, no
# auto-aim (the agent must aim itself), and no cheat-level game information.
DEATHMATCH_GAME_ARGS = (
    "-host 1 -deathmatch +sv_forcerespawn 1 +sv_noautoaim 1 +sv_respawnprotect 1 "
    "+sv_spawnfarthest 1 +sv_nocrouch 1 +viz_respawn_delay 0 +viz_nocheat 1"
)


class UnknownDoomScenarioError(UnknownEnvError):
    """Raised for a ``doom_*`` name that is not one of :data:`DOOM_SCENARIOS`."""


@dataclass(frozen=True)
class DoomScenario:
    """How to build one named VizDoom scenario."""

    name: str
    # A .cfg file in ``vizdoom.scenarios_path``; it names its own .wad.
    cfg_file: str
    description: str
    # None keeps the map the .cfg chooses.
    doom_map: str | None = None
    frameskip: int = BASIC_FRAMESKIP
    # "cfg_buttons": Discrete(no-op + one button of the .cfg at a time);
    # "factorised": the paper's Table A.4 Tuple of seven Discrete heads.
    action_set: ActionSetName = "cfg_buttons"
    # Adds the HUD measurements vector, giving a Dict observation {"obs", "measurements"}.
    measurements: bool = False
    # In-game scripted opponents added with the console command ``addbot``.
    num_bots: int = 0
    game_args: str = ""
    # Tics per episode; None keeps the .cfg's ``episode_timeout``.
    episode_timeout_tics: int | None = None
    # When set, the reward is the change of this game variable (the match score) instead of
    # the .cfg's reward, which for the competition map is always zero.
    score_variable: str | None = None
    # Train on the shaped reward of ``reward_shaping.py`` (episode statistics stay unshaped).
    reward_shaping: bool = False


def _basic(name: str, cfg_file: str, description: str) -> DoomScenario:
    return DoomScenario(name=name, cfg_file=cfg_file, description=description)


def _hud_observed(name: str, cfg_file: str, description: str) -> DoomScenario:
    # The .cfg hides the HUD from the screen but offers health (and ammunition) as game
    # variables. Without them the critic cannot see a medkit's worth until the death it delays,
    # ~100 steps later, nor how many rounds are left (docs/benchmarks.md, VizDoom).
    return DoomScenario(name=name, cfg_file=cfg_file, description=description, measurements=True)


DOOM_SCENARIOS: dict[str, DoomScenario] = {
    scenario.name: scenario
    for scenario in (
        _basic("doom_basic", "basic.cfg", "shoot the monster in front of you (300 tics)"),
        _hud_observed(
            "doom_defend_the_center",
            "defend_the_center.cfg",
            "turn in the centre of a round room and shoot approaching monsters",
        ),
        _basic(
            "doom_defend_the_line",
            "defend_the_line.cfg",
            "turn and shoot monsters approaching from the far side of a room",
        ),
        _hud_observed(
            "doom_health_gathering",
            "health_gathering.cfg",
            "collect medikits on an acid floor to stay alive",
        ),
        _hud_observed(
            "doom_health_gathering_supreme",
            "health_gathering_supreme.cfg",
            "health gathering in a maze with poison vials to avoid",
        ),
        _basic(
            "doom_my_way_home",
            "my_way_home.cfg",
            "find the vest in a maze of rooms (sparse reward)",
        ),
        _basic(
            "doom_deadly_corridor",
            "deadly_corridor.cfg",
            "reach the vest at the end of a corridor guarded by monsters",
        ),
        DoomScenario(
            name="doom_deathmatch_bots",
            cfg_file="cig.cfg",
            doom_map="map02",
            description=(
                f"{DEATHMATCH_MINUTES:g}-minute deathmatch against {DEATHMATCH_BOTS} scripted "
                "bots on the CIG 2016 full-deathmatch map; score = frags"
            ),
            frameskip=DEATHMATCH_FRAMESKIP,
            action_set="factorised",
            measurements=True,
            num_bots=DEATHMATCH_BOTS,
            game_args=DEATHMATCH_GAME_ARGS,
            episode_timeout_tics=int(DEATHMATCH_MINUTES * 60 * TICS_PER_SECOND),
            score_variable="FRAGCOUNT",
            reward_shaping=True,
        ),
    )
}


def doom_scenario(name: str) -> DoomScenario:
    """The scenario called ``name``; raises UnknownDoomScenarioError listing every name."""
    scenario = DOOM_SCENARIOS.get(name)
    if scenario is None:
        raise UnknownDoomScenarioError(
            f"unknown Doom scenario {name!r}; known: {', '.join(sorted(DOOM_SCENARIOS))}"
        )
    return scenario
