"""The HUD measurements vector of the advanced Doom scenarios (paper A.3).

Responsibility: name the game variables a human player sees on the Doom status bar -- health,
armor, selected weapon and its ammunition, weapons owned, ammunition per weapon, frags, number of
players -- and turn their raw values into the float32 ``measurements`` observation, each divided
by a typical magnitude so the network sees values of order one.

It must not: import vizdoom, or include anything a human cannot see (damage dealt, positions,
hidden counters): the policy must not get information the reward shaping is computed from.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

# (vizdoom.GameVariable member name, divisor). Weapon slots 1..7 match Table A.4's selection
# head; AMMO<k> is the ammunition of the weapon in slot k (slot 1, fist/chainsaw, has none).
HUD_VARIABLES: tuple[tuple[str, float], ...] = (
    ("HEALTH", 100.0),
    ("ARMOR", 100.0),
    ("SELECTED_WEAPON", 7.0),
    ("SELECTED_WEAPON_AMMO", 50.0),
    *((f"WEAPON{slot}", 1.0) for slot in range(1, 8)),
    *((f"AMMO{slot}", 50.0) for slot in range(2, 8)),
    ("FRAGCOUNT", 10.0),
    ("PLAYER_COUNT", 8.0),
)
MEASUREMENT_NAMES: tuple[str, ...] = tuple(name for name, _ in HUD_VARIABLES)
MEASUREMENTS_KEY = "measurements"

_DIVISORS = np.array([divisor for _, divisor in HUD_VARIABLES], dtype=np.float32)


def measurements_space() -> gym.spaces.Box:
    """The ``measurements`` observation: one float32 per HUD variable (frags can go negative)."""
    return gym.spaces.Box(-np.inf, np.inf, shape=(len(HUD_VARIABLES),), dtype=np.float32)


def measurements_vector(raw: Sequence[float] | np.ndarray) -> np.ndarray:
    """Scale raw HUD values, given in ``MEASUREMENT_NAMES`` order, into the observation."""
    values = np.asarray(raw, dtype=np.float32)
    if values.shape != _DIVISORS.shape:
        raise ValueError(
            f"expected {len(_DIVISORS)} HUD values ({', '.join(MEASUREMENT_NAMES)}), "
            f"got shape {values.shape}"
        )
    return values / _DIVISORS
