"""``doom_duel``: two agents in one VizDoom deathmatch, for self-play (paper section 4.3).

Responsibility: :class:`DoomDuelEnv`, the :class:`~sampleforge.envs.multi_agent.MultiAgentEnv`
that rollout workers step, and its factory ``make_doom_duel``. It has two seats, each playing
its own game instance (``duel_seats.py`` runs them, one process each); the two games form a
netgame in the synchronous PLAYER mode, so they advance only when both have been given their
action: the two games move in lockstep, ``frameskip`` tics per agent step. Observations,
actions and shaping are those of ``doom_deathmatch_bots``: the 128x72 RGB frame plus the HUD
``measurements`` vector, Table A.4's factorised action heads, frameskip 2, and the shaped battle
reward of ``reward_shaping.py`` with one set of weights per seat (PBT mutates them through
``set_reward_shaping``). The match lasts ``match_seconds`` of game time; on its last step
``infos[i]["win"]`` is 1.0 for the seat with more frags, 0.5 for both on a tie.

The games run in a private loopback network namespace (``loopback_netns.py``). Where none can
be made, the constructor refuses the duel with a one-line :class:`DoomDuelExposedError`, so that
training stops in the runner's own process before any worker starts, unless
``allow_exposed_ports`` accepts the exposure (the registered factory takes it from the
``SAMPLEFORGE_DOOM_DUEL_ALLOW_EXPOSED_PORTS`` environment variable, which worker processes
inherit).

It must not: import vizdoom or cv2 at import time (``import sampleforge.envs`` works without the
``doom`` extra), start games before the first ``reset`` (describing the spaces costs nothing but
a throwaway probe of namespace support, once per process), or manage seat processes and games
itself (``duel_seats.py`` starts, talks to and
stops the seats; ``duel_seat_server.py`` drives a game inside each).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from sampleforge.envs.doom.actions import FactorisedActions
from sampleforge.envs.doom.doom_env import (
    IMAGE_KEY,
    OBS_HEIGHT,
    OBS_WIDTH,
    import_doom_dependencies,
)
from sampleforge.envs.doom.duel_seat_server import SeatGameSettings, SeatReply
from sampleforge.envs.doom.duel_seats import (
    ALLOW_EXPOSED_PORTS_VARIABLE,
    NUM_SEATS,
    DoomDuelError,
    DuelSeats,
    network_isolation,
)
from sampleforge.envs.doom.measurements import (
    MEASUREMENT_NAMES,
    MEASUREMENTS_KEY,
    measurements_space,
    measurements_vector,
)
from sampleforge.envs.doom.reward_shaping import (
    GAME_VARIABLES_KEY,
    SHAPING_VARIABLES,
    DoomRewardShaping,
    shaping_terms,
)
from sampleforge.envs.doom.scenarios import TICS_PER_SECOND
from sampleforge.envs.multi_agent import MultiAgentEnv, MultiAgentStep

if TYPE_CHECKING:
    from sampleforge.envs.registry import EnvContext

DUEL_FRAMESKIP = 2  # as the deathmatch (paper Table A.5)
DEFAULT_MATCH_SECONDS = 60.0  # short, so that tests and smoke runs finish quickly
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_STEP_TIMEOUT = 30.0
# The CIG 2016 full-deathmatch map, as ``doom_deathmatch_bots`` (see scenarios.py for why).
DUEL_CFG_FILE = "cig.cfg"
DUEL_MAP = "map02"


class DoomDuelEnv(MultiAgentEnv):
    """Two agents duel in VizDoom; see the module docstring.

    Observation of a seat: ``{"obs": uint8 (3, 72, 128), "measurements": float32 (19,)}``.
    Action of a seat: a tuple of seven head choices (``HEAD_SIZES``). Reward of a seat: the
    shaped battle reward with its own weights (``reward_shaping_defaults`` are the fields of
    :class:`DoomRewardShaping`). ``infos[i]["game_variables"]`` holds the seat's raw game
    variables every step, ``infos[i]["frags"]`` its frags, and on the last step of a match
    ``infos[i]["win"]``.

    Args:
        match_seconds: game time per match (35 tics a second); the match then ends, truncated.
        connect_timeout: seconds both instances get to start and connect, from the start of
            the first ``reset``; after it a :class:`DoomDuelConnectionError` is raised.
        step_timeout: seconds a reset or step may take before :class:`DoomDuelError`.
        port: the host's UDP port; by default a free one is picked for each start, so that
            many duels can run on one machine.
        doom_map: the map of ``cig.wad`` to play.
        allow_exposed_ports: where no private network namespace can be made, run the games in
            the machine's namespace anyway, their port open on every interface (with a
            warning); otherwise the constructor raises :class:`DoomDuelExposedError`.
    """

    num_agents = NUM_SEATS
    reward_shaping_defaults = DoomRewardShaping().as_dict()

    def __init__(
        self,
        *,
        match_seconds: float = DEFAULT_MATCH_SECONDS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        step_timeout: float = DEFAULT_STEP_TIMEOUT,
        port: int | None = None,
        doom_map: str = DUEL_MAP,
        allow_exposed_ports: bool = False,
    ) -> None:
        if match_seconds <= 0 or connect_timeout <= 0 or step_timeout <= 0:
            raise ValueError("match_seconds, connect_timeout and step_timeout must be > 0")
        vzd, _ = import_doom_dependencies()  # fail here, with the install hint, not in a seat
        network_isolation(allow_exposed_ports)  # likewise: refused here, not in a worker
        self.allow_exposed_ports = allow_exposed_ports
        self._scenarios_path = str(vzd.scenarios_path)
        self.match_tics = max(1, round(match_seconds * TICS_PER_SECOND))
        self.connect_timeout = float(connect_timeout)
        self.step_timeout = float(step_timeout)
        self.port = port
        # The UDP port of the running netgame (None before the first reset and after close).
        self.host_port: int | None = None
        self.doom_map = doom_map
        self.frameskip = DUEL_FRAMESKIP
        self._actions = FactorisedActions()
        self.action_space = self._actions.space
        image = gym.spaces.Box(0, 255, shape=(3, OBS_HEIGHT, OBS_WIDTH), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(
            {IMAGE_KEY: image, MEASUREMENTS_KEY: measurements_space()}
        )
        self._variables = tuple(dict.fromkeys((*MEASUREMENT_NAMES, *SHAPING_VARIABLES)))
        self._seats: DuelSeats | None = None
        self._over = True
        self._last_obs: list[Any] = []
        self._previous: list[dict[str, float]] = []

    # ------------------------------------------------------------------ MultiAgentEnv

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
        """Start a new match; the first call starts and connects both games."""
        seed = None if seed is None else int(seed) % 2**32  # vizdoom seeds are uint32
        if self._seats is not None:
            with self._closed_on_failure():
                replies = self._seats.reset(seed, self.step_timeout)
        else:
            replies = self._start(seed)
        self._over = False
        observations, variables = self._observe(replies)
        self._previous = variables
        return observations, [{GAME_VARIABLES_KEY: v} for v in variables]

    def step(self, actions: list[Any]) -> MultiAgentStep:
        """Both seats act for ``frameskip`` tics, in lockstep."""
        if self._over or self._seats is None:
            # The runtime resets after the match; until then report the finished state.
            done = np.ones(NUM_SEATS, dtype=bool)
            return self._last_obs, np.zeros(NUM_SEATS), done, done, [{}, {}]
        if len(actions) != NUM_SEATS:
            raise ValueError(
                f"doom_duel takes {NUM_SEATS} actions, one per seat; got {len(actions)}"
            )
        buttons = [self._actions.to_buttons(a, self.frameskip) for a in actions]
        with self._closed_on_failure():
            replies = self._seats.step(buttons, self.step_timeout)
        observations, variables = self._observe(replies)
        rewards = np.array([self._shaped_reward(seat, v) for seat, v in enumerate(variables)])
        self._previous = variables
        # Both instances run the same tics, so their timers agree; either one ending ends both.
        finished = any(reply.finished for reply in replies)
        truncated = finished and any(reply.timed_out for reply in replies)
        infos = [{GAME_VARIABLES_KEY: v, "frags": v["FRAGCOUNT"]} for v in variables]
        if finished:
            self._over = True
            for info, win in zip(infos, match_outcome([v["FRAGCOUNT"] for v in variables])):
                info["win"] = win
        return (
            observations,
            rewards,
            np.full(NUM_SEATS, finished and not truncated),
            np.full(NUM_SEATS, truncated),
            infos,
        )

    def close(self) -> None:
        """Stop both games (killing whatever is left of them) and remove the temporary folder."""
        if self._seats is not None:
            self._seats.stop()  # idempotent, so close() is too
            self._seats = None
        self.host_port = None
        self._over = True

    # ------------------------------------------------------------------ seats

    def _start(self, seed: int | None) -> list[SeatReply]:
        """Start both seats and wait until their games are connected (see DuelSeats.start)."""
        self._seats, replies = DuelSeats.start(
            self._game_settings(),
            seed,
            port=self.port,
            connect_timeout=self.connect_timeout,
            allow_exposed_ports=self.allow_exposed_ports,
        )
        self.host_port = self._seats.port
        return replies

    def _game_settings(self) -> SeatGameSettings:
        return SeatGameSettings(
            cfg_path=f"{self._scenarios_path}/{DUEL_CFG_FILE}",
            doom_map=self.doom_map,
            buttons=self._actions.buttons,
            variables=self._variables,
            frameskip=self.frameskip,
            timeout_tics=self.match_tics,
            obs_width=OBS_WIDTH,
            obs_height=OBS_HEIGHT,
        )

    @contextmanager
    def _closed_on_failure(self) -> Iterator[None]:
        """Close the env when its seats fail (they have stopped themselves already)."""
        try:
            yield
        except DoomDuelError:
            self.close()
            raise

    # ------------------------------------------------------------------ observations, rewards

    def _observe(self, replies: list[SeatReply]) -> tuple[list[Any], list[dict[str, float]]]:
        variables = [dict(zip(self._variables, reply.values)) for reply in replies]
        observations = [
            {
                IMAGE_KEY: reply.image,
                MEASUREMENTS_KEY: measurements_vector(hud_values(v)),
            }
            for reply, v in zip(replies, variables)
        ]
        self._last_obs = observations
        return observations, variables

    def _shaped_reward(self, seat: int, current: dict[str, float]) -> float:
        weights = DoomRewardShaping(**self.reward_shaping(seat))
        return float(sum(shaping_terms(self._previous[seat], current, weights).values()))


def hud_values(variables: dict[str, float]) -> list[float]:
    """The raw HUD values (``MEASUREMENT_NAMES`` order) of a seat's game variables."""
    # A player gibbed by huge damage (a telefrag, a console ``kill``) reads health -999900 for
    # the one step until the engine respawns it; the status bar, and so the observation, says 0.
    return [max(variables[n], 0.0) if n == "HEALTH" else variables[n] for n in MEASUREMENT_NAMES]


def make_doom_duel(context: EnvContext, **kwargs: Any) -> DoomDuelEnv:
    """Factory of ``doom_duel`` (registered with ``multi_agent=True``); ``kwargs`` go to
    :class:`DoomDuelEnv` (wrap it in a ``functools.partial`` to register other settings).
    ``allow_exposed_ports``, unless given, comes from ``SAMPLEFORGE_DOOM_DUEL_ALLOW_EXPOSED_PORTS``
    (the command line's way to accept the exposure)."""
    del context  # ports are picked free per start; seeding comes through reset(seed=...)
    kwargs.setdefault("allow_exposed_ports", exposure_allowed_by_environment())
    return DoomDuelEnv(**kwargs)


def exposure_allowed_by_environment() -> bool:
    """``SAMPLEFORGE_DOOM_DUEL_ALLOW_EXPOSED_PORTS`` as a bool (unset or empty: False)."""
    value = os.environ.get(ALLOW_EXPOSED_PORTS_VARIABLE, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(
        f"{ALLOW_EXPOSED_PORTS_VARIABLE}={os.environ[ALLOW_EXPOSED_PORTS_VARIABLE]!r}: "
        "allowed are 1, true, yes or 0, false, no (or unset)"
    )


def match_outcome(frags: list[float]) -> list[float]:
    """``win`` of each seat: 1.0 for more frags than the other, 0.5 for a tie, 0.0 for fewer."""
    first, second = frags
    if first == second:
        return [0.5, 0.5]
    return [1.0, 0.0] if first > second else [0.0, 1.0]
