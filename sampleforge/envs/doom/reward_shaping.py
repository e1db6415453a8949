"""Reward shaping for the battle-style Doom scenarios (deathmatch against bots).

Responsibility: the shaped training reward as a pure function of two consecutive snapshots of
game variables, with every weight a named field of one dataclass (so population-based training
can mutate them: paper A.3.1), and a wrapper that applies it each step.

It must not: change what episode statistics report. The wrapper goes ABOVE the
``EpisodeStatistics`` wrapper, which therefore records the game's own score (frags), as the
paper reports it; only the learner sees the shaped reward. Nor may it feed anything back into
observations (the paper keeps hidden quantities such as damage dealt out of the policy input).

Terms (paper A.3: "penalties for dying, additional rewards for picking up new types of weapons
and dealing damage ... penalize the agent for switching the weapons too often"; the battle
scenarios add "a small additional reward for collecting health and ammo packs"). The shaped
reward replaces the game reward: the ``frag`` term is the score itself at weight 1. Pickups are
increases of health, armor, ammunition and weapons owned; on a step where the agent died (or had
been dead) they are not counted, since respawning refills health and resets the inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, SupportsFloat

import gymnasium as gym

GAME_VARIABLES_KEY = "game_variables"
WEAPON_SLOTS = tuple(range(1, 8))
AMMO_SLOTS = tuple(range(2, 8))
# Every game variable ``shaping_terms`` reads (vizdoom.GameVariable member names).
SHAPING_VARIABLES: tuple[str, ...] = (
    "FRAGCOUNT",
    "DEATHCOUNT",
    "DAMAGECOUNT",
    "HEALTH",
    "ARMOR",
    "SELECTED_WEAPON",
    *(f"WEAPON{slot}" for slot in WEAPON_SLOTS),
    *(f"AMMO{slot}" for slot in AMMO_SLOTS),
)

# Terms that compare inventories; skipped across a respawn, which resets the inventory.
_INVENTORY_TERMS = (
    "health_pickup",
    "armor_pickup",
    "ammo_pickup",
    "weapon_pickup",
    "weapon_switch",
)


@dataclass(frozen=True)
class DoomRewardShaping:
    """Weights of the shaped reward. Starting points for PBT to mutate, not tuned values."""

    frag: float = 1.0
    """Per frag, the game's score; a suicide lowers the frag count, so it costs as much."""
    death: float = -0.5
    """Per death of the agent."""
    damage_dealt: float = 0.005
    """Per hit point of damage done to opponents (a full-health bot has 100)."""
    health_pickup: float = 0.01
    """Per hit point of health gained (a medikit gives 25)."""
    armor_pickup: float = 0.005
    """Per point of armor gained (green armor gives 100)."""
    ammo_pickup: float = 0.1
    """Per weapon slot whose ammunition grew on this step (units differ too much per type)."""
    weapon_pickup: float = 0.5
    """Per weapon gained."""
    weapon_switch: float = -0.02
    """Per change of the selected weapon."""

    def as_dict(self) -> dict[str, float]:
        """The weights by name (e.g. to log them or to mutate them)."""
        return asdict(self)


def shaping_terms(
    previous: Mapping[str, float], current: Mapping[str, float], weights: DoomRewardShaping
) -> dict[str, float]:
    """Each weighted term of the shaped reward for one step, by ``DoomRewardShaping`` field.

    previous, current: game variables (``SHAPING_VARIABLES`` at least) before and after the step.
    """

    def delta(name: str) -> float:
        return float(current[name]) - float(previous[name])

    terms = {
        "frag": weights.frag * delta("FRAGCOUNT"),
        "death": weights.death * max(delta("DEATHCOUNT"), 0.0),
        "damage_dealt": weights.damage_dealt * max(delta("DAMAGECOUNT"), 0.0),
    }
    respawned = delta("DEATHCOUNT") > 0 or float(previous["HEALTH"]) <= 0
    if respawned:
        return terms | dict.fromkeys(_INVENTORY_TERMS, 0.0)
    return terms | {
        "health_pickup": weights.health_pickup * max(delta("HEALTH"), 0.0),
        "armor_pickup": weights.armor_pickup * max(delta("ARMOR"), 0.0),
        "ammo_pickup": weights.ammo_pickup * sum(delta(f"AMMO{s}") > 0 for s in AMMO_SLOTS),
        "weapon_pickup": weights.weapon_pickup
        * sum(max(delta(f"WEAPON{s}"), 0.0) for s in WEAPON_SLOTS),
        "weapon_switch": weights.weapon_switch * float(delta("SELECTED_WEAPON") != 0),
    }


def shaped_reward(
    previous: Mapping[str, float], current: Mapping[str, float], weights: DoomRewardShaping
) -> float:
    """The training reward for one step: the sum of :func:`shaping_terms`."""
    return sum(shaping_terms(previous, current, weights).values())


class DoomRewardShapingWrapper(gym.Wrapper):
    """Replaces the reward with :func:`shaped_reward` of the env's ``info["game_variables"]``.

    Wrap it around ``EpisodeStatistics`` (never under it) so episode returns stay the game score.
    """

    def __init__(self, env: gym.Env, weights: DoomRewardShaping = DoomRewardShaping()) -> None:
        super().__init__(env)
        self.weights = weights
        self._previous: Mapping[str, float] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._previous = _game_variables(info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = self.env.step(action)
        if self._previous is None:
            raise RuntimeError("step() called before reset() on the reward-shaping wrapper")
        current = _game_variables(info)
        reward = shaped_reward(self._previous, current, self.weights)
        self._previous = current
        return obs, reward, terminated, truncated, info


def _game_variables(info: Mapping[str, Any]) -> Mapping[str, float]:
    variables = info.get(GAME_VARIABLES_KEY)
    if variables is None:
        raise KeyError(f"reward shaping needs info[{GAME_VARIABLES_KEY!r}] from the Doom env")
    return variables
