"""``doom_duel``: two agents in one VizDoom deathmatch, for self-play (paper section 4.3).

What it is: a :class:`~sampleforge.envs.multi_agent.MultiAgentEnv` with two seats. Each seat
plays its own game instance; seat 0's instance hosts a two-player netgame on a free UDP port
(``-host 2 -port P``) and seat 1's joins it over the loopback interface (``-join 127.0.0.1``).
Both run in the synchronous PLAYER mode, so the netgame advances only when both instances have
been given their action: the two games move in lockstep, ``frameskip`` tics per agent step.
Observations, actions and shaping are those of ``doom_deathmatch_bots``: the 128x72 RGB frame
plus the HUD ``measurements`` vector, Table A.4's factorised action heads, frameskip 2, and the
shaped battle reward of ``reward_shaping.py`` with one set of weights per seat (PBT mutates
them through ``set_reward_shaping``). The match lasts ``match_seconds`` of game time; on its
last step ``infos[i]["win"]`` is 1.0 for the seat with more frags, 0.5 for both on a tie.

Why processes. Each game instance lives in its own small Python process (a *seat process*,
started with ``subprocess``, not ``multiprocessing``, because rollout workers are daemonic and
may not have multiprocessing children). The host's ``init()`` blocks until the joiner connects
and ``make_action`` blocks until the other player has acted, so the two instances must be driven
concurrently; and vizdoom 1.3 crashes the calling Python process with a segmentation fault when
a netgame fails to connect, which must not take a rollout worker down with it. The env process
sends a command to both seat processes and then waits for both replies.

Cleanup. Every seat process leads its own process group (``start_new_session``), which the
game's engine process (named ``vizdoom``) inherits. ``close`` asks both seats to close their
games, then kills both groups with SIGKILL after a short grace period, so no engine survives,
whatever state it was in. A failed connection, a seat error or a timeout kills both groups at
once before raising. A seat process whose parent died kills its own group (it polls its parent
id), so even a SIGKILLed rollout worker leaves no game behind. Killed engines cannot remove
their message queues and shared memory from ``/dev/shm``; whoever kills them does (Linux).

Speed (random actions, one duel, 2-core machine shared with other jobs): 380-420 agent steps
a second, that is ~1,600 env frames/s (2 seats x frameskip 2), at load ~2; half that at load
~4.5. The engines are the cost: the env process spends ~0.4 ms of CPU per step. Connecting
takes 1.3-2 s, closing 0.2-0.4 s.

It must not: import vizdoom, cv2 or torch at import time (``import sampleforge.envs`` stays
light, and seat processes import this module without sampleforge's env registry: see
``_SEAT_BOOTSTRAP``), start processes before the first ``reset`` (describing the spaces costs
nothing), or let the engine write into the working directory (seat processes run in the env's
private temporary folder, removed on ``close``).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from sampleforge.envs.doom.actions import FactorisedActions
from sampleforge.envs.doom.engine_ipc import (
    engine_instance_ids,
    engine_ipc_mapped_by,
    remove_engine_ipc,
    remove_orphan_engine_ipc,
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
from sampleforge.envs.multi_agent import MultiAgentEnv, MultiAgentStep

if TYPE_CHECKING:
    from sampleforge.envs.registry import EnvContext

NUM_SEATS = 2
DUEL_FRAMESKIP = 2  # as the deathmatch (paper Table A.5)
DEFAULT_MATCH_SECONDS = 60.0  # short, so that tests and smoke runs finish quickly
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_STEP_TIMEOUT = 30.0
# The CIG 2016 full-deathmatch map, as ``doom_deathmatch_bots`` (see scenarios.py for why).
DUEL_CFG_FILE = "cig.cfg"
DUEL_MAP = "map02"
LOOPBACK = "127.0.0.1"
# Netgame rules, set by the host: deathmatch, immediate respawn (the engine respawns a dead
# player by itself, so both instances always advance by the same number of tics: an explicit
# ``respawn_player`` would advance only one), brief spawn protection, spawn far from the
# opponent, no auto-aim, no crouching, no cheat-level game information. The same rules as the
# bot deathmatch.
DUEL_RULES = (
    "-deathmatch +sv_forcerespawn 1 +sv_noautoaim 1 +sv_respawnprotect 1 "
    "+sv_spawnfarthest 1 +sv_nocrouch 1 +viz_respawn_delay 0 +viz_nocheat 1"
)
SEAT_COLORS = (0, 3)  # green and red, so the agents can tell each other apart
CLOSE_GRACE_SECONDS = 3.0  # for a seat process to close its game before it is killed
PARENT_POLL_SECONDS = 0.5
START_ATTEMPTS = 3  # see DoomDuelEnv._start_retrying_crashes

# How a seat process starts: register the three sampleforge packages as bare namespaces, so
# that importing this module does not run their ``__init__`` files (the env registry imports
# torch: ~1 s and ~170 MB per seat process for nothing). This module, and the five it imports
# from sampleforge, must therefore import neither the registry nor ``doom_env``.
_SEAT_BOOTSTRAP = """\
import sys, types
for name, path in {packages!r}:
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from sampleforge.envs.doom.duel import serve_seat
serve_seat(int(sys.argv[1]))
"""


class DoomDuelError(RuntimeError):
    """A seat's game failed, hung or died during a duel; both games have been stopped."""


class DoomDuelConnectionError(DoomDuelError):
    """The two game instances did not connect in time; both games have been stopped."""


@dataclass(frozen=True)
class SeatConfig:
    """Everything a seat process needs to build and drive its game (plain data, pickled)."""

    seat: int
    cfg_path: str
    doom_map: str
    game_args: str
    buttons: tuple[str, ...]
    variables: tuple[str, ...]
    frameskip: int
    timeout_tics: int
    obs_width: int
    obs_height: int
    ini_path: str
    seed: int | None


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
    ) -> None:
        # Imported here rather than at the top because seat processes import this module and
        # must not load the env registry (see _SEAT_BOOTSTRAP).
        from sampleforge.envs.doom.doom_env import (
            IMAGE_KEY,
            OBS_HEIGHT,
            OBS_WIDTH,
            import_doom_dependencies,
        )
        from sampleforge.envs.doom.scenarios import TICS_PER_SECOND

        if match_seconds <= 0 or connect_timeout <= 0 or step_timeout <= 0:
            raise ValueError("match_seconds, connect_timeout and step_timeout must be > 0")
        vzd, _ = import_doom_dependencies()  # fail here, with the install hint, not in a seat
        self._scenarios_path = str(vzd.scenarios_path)
        self._image_key = IMAGE_KEY
        self._obs_size = (OBS_WIDTH, OBS_HEIGHT)
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
        self._seats: list[_SeatProcess] = []
        self._work_dir = ""
        self._release: weakref.finalize | None = None
        self._over = True
        self._last_obs: list[Any] = []
        self._previous: list[dict[str, float]] = []

    # ------------------------------------------------------------------ MultiAgentEnv

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
        """Start a new match; the first call starts and connects both games."""
        seed = None if seed is None else int(seed) % 2**32  # vizdoom seeds are uint32
        if self._seats:
            replies = self._exchange([("reset", seed)] * NUM_SEATS, self.step_timeout, "reset")
        else:
            replies = self._start_retrying_crashes(seed)
        self._over = False
        observations, variables = self._observe(replies)
        self._previous = variables
        return observations, [{GAME_VARIABLES_KEY: v} for v in variables]

    def step(self, actions: list[Any]) -> MultiAgentStep:
        """Both seats act for ``frameskip`` tics, in lockstep."""
        if self._over:
            # The runtime resets after the match; until then report the finished state.
            done = np.ones(NUM_SEATS, dtype=bool)
            return self._last_obs, np.zeros(NUM_SEATS), done, done, [{}, {}]
        if len(actions) != NUM_SEATS:
            raise ValueError(
                f"doom_duel takes {NUM_SEATS} actions, one per seat; got {len(actions)}"
            )
        commands = [("step", self._actions.to_buttons(a, self.frameskip)) for a in actions]
        replies = self._exchange(commands, self.step_timeout, "step")
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
        if self._release is not None:
            self._release()  # a finalizer runs at most once, so close() is idempotent
            self._release = None
        self._seats = []
        self.host_port = None
        self._over = True

    # ------------------------------------------------------------------ seats

    def _start_retrying_crashes(self, seed: int | None) -> list[SeatReply]:
        """`_start`, repeated on a fresh port (up to START_ATTEMPTS in all) when a game dies
        while starting, but not when the games fail to connect in time: two engines starting
        at the same moment can clash over their IPC names ("File exists"), or another program
        can take the probed port. Names that killed engines left behind are removed first."""
        remove_orphan_engine_ipc()
        started = time.monotonic()
        for _ in range(START_ATTEMPTS - 1):
            try:
                return self._start(seed)
            except DoomDuelConnectionError:
                self.close()
                if self.port is not None or time.monotonic() - started >= self.connect_timeout:
                    raise
        return self._start(seed)

    def _start(self, seed: int | None) -> list[SeatReply]:
        """Start both seat processes and wait until their games are connected."""
        port = self.host_port = self.port if self.port is not None else free_udp_port()
        work_dir = self._work_dir = tempfile.mkdtemp(prefix="sampleforge_doom_duel_")
        self._seats = []
        # Runs on close(), or when the env is garbage-collected or Python exits without it. It
        # holds the very list the seats are appended to, so a failed second spawn stops the first.
        self._release = weakref.finalize(self, _stop_seats, self._seats, work_dir)
        try:
            for seat in range(NUM_SEATS):
                config = self._seat_config(seat, port, work_dir, seed)
                self._seats.append(_SeatProcess.spawn(seat, work_dir, config))
            return self._gather(self.connect_timeout, "connect")
        except DoomDuelError as error:
            raise DoomDuelConnectionError(
                f"doom_duel: the two game instances did not connect on UDP port {port} of "
                f"{LOOPBACK} within {self.connect_timeout:g} s ({error})"
            ) from None
        except BaseException:
            self.close()
            raise

    def _seat_config(self, seat: int, port: int, work_dir: str, seed: int | None) -> SeatConfig:
        return SeatConfig(
            seat=seat,
            cfg_path=f"{self._scenarios_path}/{DUEL_CFG_FILE}",
            doom_map=self.doom_map,
            game_args=seat_game_args(seat, port, self.connect_timeout),
            buttons=self._actions.buttons,
            variables=self._variables,
            frameskip=self.frameskip,
            timeout_tics=self.match_tics,
            obs_width=self._obs_size[0],
            obs_height=self._obs_size[1],
            ini_path=f"{work_dir}/seat{seat}.ini",
            seed=seed,
        )

    def _exchange(
        self, commands: list[tuple[str, Any]], timeout: float, what: str
    ) -> list[SeatReply]:
        """Send one command to each seat, then wait for both replies."""
        for seat, command in zip(self._seats, commands):
            try:
                seat.connection.send(command)
            except OSError:
                pass  # the seat died; _gather reports it
        return self._gather(timeout, what)

    def _gather(self, timeout: float, what: str) -> list[SeatReply]:
        """Both seats' replies; on any failure both games are stopped and DoomDuelError raised."""
        try:
            return _gather_replies(self._seats, timeout, what)
        except DoomDuelError:
            # A seat that failed or hangs will not close its game: no grace, kill both now.
            _stop_seats(self._seats, self._work_dir, grace=0.0)
            self.close()
            raise

    # ------------------------------------------------------------------ observations, rewards

    def _observe(self, replies: list[SeatReply]) -> tuple[list[Any], list[dict[str, float]]]:
        variables = [dict(zip(self._variables, reply.values)) for reply in replies]
        observations = [
            {
                self._image_key: reply.image,
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
    :class:`DoomDuelEnv` (wrap it in a ``functools.partial`` to register other settings)."""
    del context  # ports are picked free per start; seeding comes through reset(seed=...)
    return DoomDuelEnv(**kwargs)


def match_outcome(frags: list[float]) -> list[float]:
    """``win`` of each seat: 1.0 for more frags than the other, 0.5 for a tie, 0.0 for fewer."""
    first, second = frags
    if first == second:
        return [0.5, 0.5]
    return [1.0, 0.0] if first > second else [0.0, 1.0]


def seat_game_args(seat: int, port: int, connect_timeout: float) -> str:
    """Engine arguments of ``seat``: seat 0 hosts the netgame on ``port``, seat 1 joins it."""
    # The engine gives up by itself a little after we do, in case it outlives its seat process.
    engine_timeout = math.ceil(connect_timeout) + 5
    if seat == 0:
        network = f"-host {NUM_SEATS} -port {port} -netmode 0 {DUEL_RULES}"
    else:
        network = f"-join {LOOPBACK} -port {port}"
    player = f"+name seat{seat} +colorset {SEAT_COLORS[seat]}"
    return f"{network} +viz_connect_timeout {engine_timeout} {player}"


def free_udp_port() -> int:
    """A UDP port no socket is bound to right now (the OS picks it from its ephemeral range)."""
    # The engine binds all interfaces, so probe those; the port is free again when we close.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------- the env's side of a seat


@dataclass
class SeatReply:
    """What a seat process answers to ``connect``, ``reset`` and ``step``."""

    image: np.ndarray  # uint8 (3, H, W)
    values: list[float]  # the game variables, in the order of SeatConfig.variables
    finished: bool
    timed_out: bool


@dataclass
class _SeatProcess:
    """A running seat process and the env's end of its connection."""

    seat: int
    process: subprocess.Popen
    connection: Connection
    log_path: str

    @classmethod
    def spawn(cls, seat: int, work_dir: str, config: SeatConfig) -> _SeatProcess:
        """Start the process of ``seat`` in ``work_dir`` and send it ``connect``."""
        ours, theirs = Pipe()
        log_path = f"{work_dir}/seat{seat}.log"
        seat_dir = f"{work_dir}/seat{seat}"
        os.mkdir(seat_dir)
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                _seat_command(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                # Each engine creates ./_vizdoom: two creating one folder at the same moment
                # can fail with "File exists", so each seat has its own working directory.
                cwd=seat_dir,
                start_new_session=True,  # its own process group, which the engine joins
                stdin=subprocess.DEVNULL,
                # The engine's netgame chatter, and the seat's traceback should it crash.
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        theirs.close()
        ours.send(("connect", config))
        return cls(seat, process, ours, log_path)

    def ask_to_close(self) -> None:
        """Ask the seat to close its game and exit (it may be too busy or dead to hear)."""
        try:
            self.connection.send(("close", None))
        except OSError:
            pass  # already gone

    def kill(self, deadline: float) -> None:
        """Wait until ``deadline`` for the seat to exit, then kill its process group and clean
        up after any engine that had to be killed. Idempotent."""
        if self.process.returncode is not None:
            return  # stopped and reaped before
        while time.monotonic() < deadline and _exit_status(self.process.pid) is None:
            time.sleep(0.02)
        # Killed engines leave their message queues and shared memory in /dev/shm; their names
        # carry the engine's instance id, which a live engine's command line tells, and which
        # the seat maps (also when its engine died, or the seat is killed while closing).
        engines = _seat_engines(self.process.pid)
        # Kill the group while the seat process is unreaped: its id, which is the group's id,
        # cannot belong to anyone else yet.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.connection.close()
        remove_engine_ipc(engines)


def _seat_engines(seat_pid: int) -> list[str]:
    """Instance ids of the engine of the seat process ``seat_pid`` (the leader of its process
    group): running engines in the group, and the names the seat has mapped."""
    return sorted(set(engine_instance_ids(seat_pid)) | set(engine_ipc_mapped_by(seat_pid)))


def _seat_command(fd: int) -> list[str]:
    """The command line of a seat process talking over connection ``fd``."""
    here = Path(__file__).parent  # .../sampleforge/envs/doom
    packages = [
        ("sampleforge", str(here.parent.parent)),
        ("sampleforge.envs", str(here.parent)),
        ("sampleforge.envs.doom", str(here)),
    ]
    return [sys.executable, "-c", _SEAT_BOOTSTRAP.format(packages=packages), str(fd)]


def _exit_status(pid: int) -> str | None:
    """How child ``pid`` ended ("exit code 1", "signal 11"), or None while it runs; it is not
    reaped, so its id stays ours."""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "reaped"
    if result is None:
        return None
    if result.si_code == os.CLD_EXITED:
        return f"exit code {result.si_status}"
    return f"signal {result.si_status}"


def _gather_replies(seats: list[_SeatProcess], timeout: float, what: str) -> list[SeatReply]:
    """One reply from every seat within ``timeout`` seconds, or DoomDuelError."""
    deadline = time.monotonic() + timeout
    replies: dict[int, SeatReply] = {}
    by_connection = {seat.connection: seat for seat in seats}
    while len(replies) < len(seats):
        waiting = [c for c, s in by_connection.items() if s.seat not in replies]
        ready = wait(waiting, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = ", ".join(f"seat {by_connection[c].seat}" for c in waiting)
            raise DoomDuelError(f"{what}: no answer from {late} within {timeout:g} s")
        for connection in ready:
            seat = by_connection[connection]  # type: ignore[index]
            try:
                status, payload = connection.recv()  # type: ignore[union-attr]
            except (EOFError, OSError):
                status = _exit_status(seat.process.pid) or "still running"
                raise DoomDuelError(
                    f"{what}: seat {seat.seat}'s game process ended ({status}; "
                    f"last output: {_last_line(seat.log_path)!r})"
                ) from None
            if status != "ok":
                raise DoomDuelError(f"{what}: seat {seat.seat} failed: {payload}")
            replies[seat.seat] = payload
    return [replies[seat.seat] for seat in seats]


def _last_line(path: str, limit: int = 200) -> str:
    """The last non-blank line of a seat's log (the engine redraws progress lines with CR)."""
    try:
        text = Path(path).read_bytes()[-4096:].decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _stop_seats(
    seats: list[_SeatProcess], work_dir: str, grace: float = CLOSE_GRACE_SECONDS
) -> None:
    """Stop every seat: ask all, give them ``grace`` seconds together, kill what is left."""
    for seat in seats:
        seat.ask_to_close()
    deadline = time.monotonic() + grace
    for seat in seats:
        seat.kill(deadline)
    # The engines save their settings while closing, so the folder goes after them.
    shutil.rmtree(work_dir, ignore_errors=True)


# ---------------------------------------------------------------------- inside a seat process


def serve_seat(fd: int) -> None:
    """Main loop of a seat process: run one game, answering the env over connection ``fd``.

    Commands: ``("connect", SeatConfig)``, ``("reset", seed)``, ``("step", buttons)``,
    ``("close", None)``. Each is answered ``("ok", SeatReply)`` or ``("error", message)``; after
    an error, a ``close`` or the env's end of the connection closing, the game is closed and the
    process exits.
    """
    os.set_inheritable(fd, False)  # the engine must not hold our connection open
    connection = Connection(fd)
    _exit_with_parent(os.getppid())
    game: _SeatGame | None = None
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
                    game = _SeatGame(argument)
                    reply = game.connect()
                elif game is None:
                    raise RuntimeError(f"{command!r} before 'connect'")
                elif command == "reset":
                    reply = game.new_episode(argument)
                elif command == "step":
                    reply = game.step(argument)
                else:
                    raise ValueError(f"unknown seat command {command!r}")
            except Exception as error:  # noqa: BLE001 - reported to the env, which stops both
                connection.send(("error", f"{type(error).__name__}: {error}"))
                return
            connection.send(("ok", reply))
    finally:
        engines = _seat_engines(os.getpid())
        if game is not None:
            game.close()
        # A game whose engine died while starting (game is None then) or while closing leaves
        # its names behind: this process is their only user.
        remove_engine_ipc(engines)


def _exit_with_parent(parent: int) -> None:
    """Kill this process group (this process and its engine) once the env's process is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        # The engine may be blocked and the main thread with it, so no graceful close: unlink
        # what the engine would have removed in /dev/shm (it may, on Linux, while in use), then
        # kill it and ourselves.
        remove_engine_ipc(_seat_engines(os.getpid()))
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _SeatGame:
    """One player's ``vizdoom.DoomGame`` inside a seat process."""

    def __init__(self, config: SeatConfig) -> None:
        import cv2
        import vizdoom as vzd

        self._vzd, self._cv2, self.config = vzd, cv2, config
        game = vzd.DoomGame()
        game.load_config(config.cfg_path)
        game.set_doom_map(config.doom_map)
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)  # synchronous: the netgame waits for both players
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        game.set_episode_timeout(config.timeout_tics)
        game.set_doom_config_path(config.ini_path)
        game.set_available_buttons([vzd.Button.__members__[b] for b in config.buttons])
        members = vzd.GameVariable.__members__
        game.set_available_game_variables([members[name] for name in config.variables])
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
        self.game.make_action(buttons, self.config.frameskip)
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
            values = [game.get_game_variable(members[n]) for n in self.config.variables]
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
        size = (self.config.obs_width, self.config.obs_height)
        small = self._cv2.resize(frame, size, interpolation=self._cv2.INTER_AREA)
        return np.ascontiguousarray(small.transpose(2, 0, 1))
