"""What runs inside a ``doom_duel`` seat process: one player's VizDoom game, driven over a pipe.

Responsibility: the seat process's main loop (:func:`serve_seat`), which builds one
``vizdoom.DoomGame`` from a :class:`SeatConfig` (headless, 160x120 RGB24, synchronous PLAYER
mode, the netgame arguments it is given), then answers the env's commands one at a time with a
:class:`SeatReply`: the frame downsampled to 128x72 (cv2 INTER_AREA, uint8 channels first), the
game variables, and whether the match is over. It also defines that protocol (the two plain
dataclasses, pickled over the pipe) and cleans up after its own engine: on any exit it closes
the game and removes the engine's names from ``/dev/shm``, and once its parent (the env's
process) is gone it kills its whole process group, engine included, even while the game blocks.

Commands: ``("connect", SeatConfig)``, ``("reset", seed)``, ``("step", buttons)``,
``("close", None)``. Each is answered ``("ok", SeatReply)`` or ``("error", message)``.

It must not: import vizdoom or cv2 at import time, or import from sampleforge anything but
``engine_ipc`` (seat processes import this module without running sampleforge's package
``__init__`` files, so that they load neither the env registry nor torch: see ``duel_seats.py``),
know about the other seat (the netgame arguments come ready-made), or shape rewards and build
observations beyond the downsampled frame (``duel_env.py`` does).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from sampleforge.envs.doom.engine_ipc import (
    engine_instance_ids,
    engine_ipc_held_by,
    remove_engine_ipc,
)

PARENT_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SeatGameSettings:
    """How every seat's game is set up; the same for both seats (plain data, pickled)."""

    cfg_path: str
    doom_map: str
    buttons: tuple[str, ...]
    variables: tuple[str, ...]
    frameskip: int
    timeout_tics: int
    obs_width: int
    obs_height: int


@dataclass(frozen=True)
class SeatConfig:
    """Everything a seat process needs to build and drive its game (plain data, pickled)."""

    seat: int
    game: SeatGameSettings
    game_args: str  # the engine's netgame arguments: host or join, rules, name, colour
    ini_path: str
    seed: int | None


@dataclass
class SeatReply:
    """What a seat process answers to ``connect``, ``reset`` and ``step``."""

    image: np.ndarray  # uint8 (3, H, W)
    values: list[float]  # the game variables, in the order of SeatGameSettings.variables
    finished: bool
    timed_out: bool


def seat_engines(seat_pid: int) -> list[str]:
    """Instance ids of the engine of the seat process ``seat_pid`` (the leader of its process
    group): running engines in the group, and the names the seat holds (open or mapped)."""
    return sorted(set(engine_instance_ids(seat_pid)) | set(engine_ipc_held_by(seat_pid)))


def serve_seat(fd: int) -> None:
    """Main loop of a seat process: run one game, answering the env over connection ``fd``.

    See the module docstring for the commands; after an error, a ``close`` or the env's end of
    the connection closing, the game is closed and the process exits.
    """
    os.set_inheritable(fd, False)  # the engine must not hold our connection open
    connection = Connection(fd)
    _exit_with_parent(os.getppid())
    game: SeatGame | None = None
    try:
        while True:
            try:
                command, argument = connection.recv()
            except EOFError:
                return
            if command == "close":
                return
            try:
                if command == "connect":
                    game = SeatGame(argument)
                reply = _answer(game, command, argument)
            except Exception as error:  # noqa: BLE001 - reported to the env, which stops both
                connection.send(("error", f"{type(error).__name__}: {error}"))
                return
            connection.send(("ok", reply))
    finally:
        engines = seat_engines(os.getpid())
        if game is not None:
            game.close()
        # A game whose engine died while starting (game is None then) or while closing leaves
        # its names behind: this process is their only user.
        remove_engine_ipc(engines)


def _answer(game: SeatGame | None, command: str, argument: Any) -> SeatReply:
    """Carry out one command other than ``close`` on ``game`` (built by ``connect``)."""
    if game is None:
        raise RuntimeError(f"{command!r} before 'connect'")
    if command == "connect":
        return game.connect()
    if command == "reset":
        return game.new_episode(argument)
    if command == "step":
        return game.step(argument)
    raise ValueError(f"unknown seat command {command!r}")


def _exit_with_parent(parent: int) -> None:
    """Kill this process group (this process and its engine) once the env's process is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        # The engine may be blocked and the main thread with it, so no graceful close: unlink
        # what the engine would have removed in /dev/shm (it may, on Linux, while in use), then
        # kill it and ourselves.
        remove_engine_ipc(seat_engines(os.getpid()))
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class SeatGame:
    """One player's ``vizdoom.DoomGame`` inside a seat process."""

    def __init__(self, config: SeatConfig) -> None:
        import cv2
        import vizdoom as vzd

        self._vzd, self._cv2, self.config = vzd, cv2, config
        settings = config.game
        game = vzd.DoomGame()
        game.load_config(settings.cfg_path)
        game.set_doom_map(settings.doom_map)
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)  # synchronous: the netgame waits for both players
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        game.set_episode_timeout(settings.timeout_tics)
        game.set_doom_config_path(config.ini_path)
        game.set_available_buttons([vzd.Button.__members__[b] for b in settings.buttons])
        members = vzd.GameVariable.__members__
        game.set_available_game_variables([members[name] for name in settings.variables])
        game.add_game_args(config.game_args)
        if config.seed is not None:
            game.set_seed(config.seed)
        self.game = game
        self._last_image: np.ndarray | None = None

    def connect(self) -> SeatReply:
        """Start the engine; returns once both players are in the game (host: blocks)."""
        self.game.init()
        return self._reply()

    def new_episode(self, seed: int | None) -> SeatReply:
        """Restart the match; both players must call it (the netgame restarts the map)."""
        if seed is not None:
            self.game.set_seed(seed)
        self.game.new_episode()
        return self._reply()

    def step(self, buttons: list[float]) -> SeatReply:
        """Hold ``buttons`` for ``frameskip`` tics (returns once the other player has acted)."""
        self.game.make_action(buttons, self.config.game.frameskip)
        return self._reply()

    def close(self) -> None:
        self.game.close()

    def _reply(self) -> SeatReply:
        game = self.game
        state = game.get_state()
        if state is not None and state.game_variables is not None:
            self._last_image = self._downsample(state.screen_buffer)
            values = state.game_variables.tolist()
        else:
            # After the match there is no state, but the game still answers directly.
            members = self._vzd.GameVariable.__members__
            values = [game.get_game_variable(members[n]) for n in self.config.game.variables]
        if self._last_image is None:
            raise RuntimeError("the game gave no screen to observe")
        finished = game.is_episode_finished()
        return SeatReply(
            image=self._last_image,
            values=values,
            finished=finished,
            timed_out=finished and game.is_episode_timeout_reached(),
        )

    def _downsample(self, frame: np.ndarray) -> np.ndarray:
        size = (self.config.game.obs_width, self.config.game.obs_height)
        small = self._cv2.resize(frame, size, interpolation=self._cv2.INTER_AREA)
        return np.ascontiguousarray(small.transpose(2, 0, 1))
