"""Action spaces of the Doom scenarios, and how an agent's action becomes Doom button values.

Responsibility: two action sets, each a gymnasium space plus a pure translation from one action
to the list of button values ``DoomGame.make_action`` takes (in the order of ``buttons``):

* ``CfgButtonActions``: the buttons a scenario's .cfg declares, pressed one at a time, plus a
  no-op as action 0 -- ``Discrete(len(buttons) + 1)``.
* ``FactorisedActions``: the paper's Table A.4 -- seven independent heads (moving 3, strafing 3,
  attacking 2, sprinting 2, interaction 2, weapon selection 8, horizontal aim 21) as a
  ``Tuple`` of ``Discrete``, 12,096 combinations in all.

It must not: import vizdoom (buttons are named by their ``vizdoom.Button`` member names so the
tables can be tested without the game) or keep any per-episode state.

Horizontal aim: head value ``k`` turns by ``AIM_DEGREES[k]`` (from -12.5 to +12.5 in 1.25 degree
steps; index 10 is no turn; positive turns right, as Doom's delta button does) over one agent
step. Doom applies a delta button's value on every tic, so the value sent is divided by the
number of tics the action is repeated for; the turn per agent step is then the same at any
frameskip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

AIM_STEP_DEGREES = 1.25
AIM_DEGREES: tuple[float, ...] = tuple(AIM_STEP_DEGREES * k for k in range(-10, 11))
AIM_BUTTON = "TURN_LEFT_RIGHT_DELTA"

# Table A.4, head by head: the button each non-zero choice presses (choice 0 is no-action).
MOVING = ("MOVE_FORWARD", "MOVE_BACKWARD")
STRAFING = ("MOVE_LEFT", "MOVE_RIGHT")
ATTACKING = ("ATTACK",)
SPRINTING = ("SPEED",)
INTERACTION = ("USE",)
WEAPON_SELECTION = tuple(f"SELECT_WEAPON{slot}" for slot in range(1, 8))
PRESS_HEADS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("moving", MOVING),
    ("strafing", STRAFING),
    ("attacking", ATTACKING),
    ("sprinting", SPRINTING),
    ("interaction", INTERACTION),
    ("weapon_selection", WEAPON_SELECTION),
)
HEAD_NAMES: tuple[str, ...] = tuple(name for name, _ in PRESS_HEADS) + ("horizontal_aim",)
HEAD_SIZES: tuple[int, ...] = tuple(len(buttons) + 1 for _, buttons in PRESS_HEADS) + (
    len(AIM_DEGREES),
)


class CfgButtonActions:
    """No-op plus each of ``buttons`` alone: action ``i > 0`` presses ``buttons[i - 1]``."""

    def __init__(self, buttons: Sequence[str]) -> None:
        if not buttons:
            raise ValueError("a Doom scenario needs at least one available button")
        self.buttons: tuple[str, ...] = tuple(buttons)
        self.space = gym.spaces.Discrete(len(self.buttons) + 1)
        no_op = [[0.0] * len(self.buttons)]
        one_hot = np.eye(len(self.buttons)).tolist()
        self._table: list[list[float]] = no_op + one_hot

    def to_buttons(self, action: Any, tics: int) -> list[float]:
        """Button values for ``action`` (an int in the space); ``tics`` is unused here."""
        index = int(action)
        if not 0 <= index < len(self._table):
            raise ValueError(f"action {action!r} is outside Discrete({len(self._table)})")
        return self._table[index]

    def meanings(self) -> list[str]:
        """A human-readable name per action index."""
        return ["NOOP", *self.buttons]


class FactorisedActions:
    """Table A.4's seven heads; ``buttons`` is the order ``to_buttons`` fills values in."""

    def __init__(self) -> None:
        pressed = [button for _, buttons in PRESS_HEADS for button in buttons]
        self.buttons: tuple[str, ...] = (*pressed, AIM_BUTTON)
        self.space = gym.spaces.Tuple(gym.spaces.Discrete(size) for size in HEAD_SIZES)
        # Where each press head's first button sits in ``buttons``.
        offsets, position = [], 0
        for _, buttons in PRESS_HEADS:
            offsets.append(position)
            position += len(buttons)
        self._offsets: tuple[int, ...] = tuple(offsets)

    def to_buttons(self, action: Sequence[int], tics: int) -> list[float]:
        """Button values for one choice per head; the aim is spread over ``tics`` tics."""
        if len(action) != len(HEAD_SIZES):
            raise ValueError(
                f"a deathmatch action has {len(HEAD_SIZES)} heads {HEAD_NAMES}, "
                f"got {len(action)} values"
            )
        choices = [int(choice) for choice in action]
        if not all(0 <= choice < size for choice, size in zip(choices, HEAD_SIZES)):
            raise ValueError(f"action {tuple(choices)} is outside the head sizes {HEAD_SIZES}")
        values = [0.0] * len(self.buttons)
        for offset, choice in zip(self._offsets, choices[:-1]):
            if choice > 0:
                values[offset + choice - 1] = 1.0
        values[-1] = AIM_DEGREES[choices[-1]] / tics
        return values
