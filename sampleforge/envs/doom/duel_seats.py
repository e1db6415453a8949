"""The env's side of the two ``doom_duel`` seat processes: start them, talk to them, stop them.

Responsibility: :class:`DuelSeats` starts one seat process per player (``duel_seat_server.py``
runs in it), gives each its netgame arguments, sends every command to both seats and waits for
both replies within a timeout, and stops both so that no process, engine or ``/dev/shm`` name
survives. Seat 0's game hosts a two-player netgame (``-host 2 -port P``, with the duel's rules)
and seat 1's game joins it (``-join 127.0.0.1``). ZDoom binds that UDP port on every interface,
so both seat processes run in a private network namespace whose only interface is loopback
(``loopback_netns.py``; without CAP_SYS_ADMIN, inside a user namespace of their own): nothing
outside the duel can reach its games. Where the kernel refuses both routes, the duel is refused
(:class:`DoomDuelExposedError`) unless its user accepts the exposure
(``allow_exposed_ports=True``, or ``SAMPLEFORGE_DOOM_DUEL_ALLOW_EXPOSED_PORTS=1`` for the
registered ``doom_duel``); then it runs in the machine's namespace and a warning says so. By
default the port is a free one, picked anew for each start, so that many duels can run on one
machine.

Why processes. Each game instance lives in its own small Python process, started with
``subprocess``, not ``multiprocessing``, because rollout workers are daemonic and may not have
multiprocessing children. The host's ``init()`` blocks until the joiner connects and
``make_action`` blocks until the other player has acted, so the two games must be driven
concurrently; and vizdoom 1.3 crashes the calling Python process with a segmentation fault when
a netgame fails to connect, which must not take a rollout worker down with it.

Cleanup. Every seat process leads its own process group (``start_new_session``), which its
game's engine process (named ``vizdoom``) inherits. Stopping asks both seats to close their
games, then kills both groups with SIGKILL after a short grace period, so no engine survives,
whatever state it was in. A failed connection, a seat error or a timeout kills both groups at
once before raising. Seats whose env is garbage-collected, or whose Python exits, are stopped
too, and a seat process whose parent died kills its own group (``duel_seat_server.py``). Killed
engines cannot remove their message queues and shared memory from ``/dev/shm``; whoever kills
them does (Linux).

It must not: import vizdoom or cv2 (games run only in seat processes), start seat processes with
``multiprocessing``, let an engine write into the working directory (each seat runs in its own
folder inside the duel's private temporary folder, removed when the seats stop), or build
observations and rewards (``duel_env.py`` does).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe, wait
from pathlib import Path
from typing import Callable, cast

from sampleforge.envs.doom.duel_seat_server import (
    SeatConfig,
    SeatGameSettings,
    SeatReply,
    seat_engines,
)
from sampleforge.envs.doom.engine_ipc import remove_engine_ipc, remove_orphan_engine_ipc
from sampleforge.envs.doom.loopback_netns import (
    Isolation,
    enter_namespace_of,
    isolation,
    new_namespace_step,
)

log = logging.getLogger(__name__)

NUM_SEATS = 2
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
START_ATTEMPTS = 3  # see DuelSeats.start

# How a seat process starts: register the three sampleforge packages as bare namespaces, so
# that importing the seat server does not run their ``__init__`` files (the env registry imports
# torch: ~1 s and ~170 MB per seat process for nothing). ``duel_seat_server.py``, and what it
# imports from sampleforge, must therefore import neither the registry nor ``doom_env``.
_SEAT_BOOTSTRAP = """\
import sys, types
for name, path in {packages!r}:
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from sampleforge.envs.doom.duel_seat_server import serve_seat
serve_seat(int(sys.argv[1]))
"""


class DoomDuelError(RuntimeError):
    """A seat's game failed, hung or died during a duel; both games have been stopped."""


class DoomDuelConnectionError(DoomDuelError):
    """The two game instances did not connect in time; both games have been stopped."""


class DoomDuelExposedError(RuntimeError):
    """No private network namespace can be made here, and the duel was not allowed to listen
    on the machine's interfaces; nothing was started."""


# The registered ``doom_duel`` reads its ``allow_exposed_ports`` from here (duel_env.py).
ALLOW_EXPOSED_PORTS_VARIABLE = "SAMPLEFORGE_DOOM_DUEL_ALLOW_EXPOSED_PORTS"


def seat_game_args(seat: int, port: int, connect_timeout: float) -> str:
    """Engine arguments of ``seat``: seat 0 hosts the netgame on ``port`` (bound on every
    interface of the duel's network namespace), seat 1 joins it over loopback."""
    # The engine gives up by itself a little after we do, in case it outlives its seat process.
    engine_timeout = math.ceil(connect_timeout) + 5
    if seat == 0:
        network = f"-host {NUM_SEATS} -port {port} -netmode 0 {DUEL_RULES}"
    else:
        network = f"-join {LOOPBACK} -port {port}"
    player = f"+name seat{seat} +colorset {SEAT_COLORS[seat]}"
    return f"{network} +viz_connect_timeout {engine_timeout} {player}"


_warned: set[str] = set()


def network_isolation(allow_exposed_ports: bool) -> Isolation | None:
    """How the seats get their private loopback namespace here; None when they cannot and
    ``allow_exposed_ports`` accepts running in the machine's namespace (warned once per
    process). Raises :class:`DoomDuelExposedError` when they cannot and it does not."""
    found = isolation()
    if found.problem is None:
        return found
    if not allow_exposed_ports:
        raise DoomDuelExposedError(
            f"doom_duel: {found.problem}, so its games would listen on every interface of this "
            f"machine; to accept that, pass allow_exposed_ports=True to DoomDuelEnv or set "
            f"{ALLOW_EXPOSED_PORTS_VARIABLE}=1"
        )
    if found.problem not in _warned:
        _warned.add(found.problem)
        log.warning(
            "doom_duel: %s; the games run in this machine's network namespace, where "
            "ZDoom's netgame port listens on every interface (allow_exposed_ports)",
            found.problem,
        )
    return None


def free_udp_port() -> int:
    """A UDP port no socket is bound to right now (the OS picks it from its ephemeral range)."""
    # The engine binds all interfaces, so probe those; the port is free again when we close.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


class DuelSeats:
    """The two running seat processes of one duel, connected to each other's games.

    Made by :meth:`start`; stopped by :meth:`stop`, by any failure, or when garbage-collected
    or at exit. Every method that talks to the seats raises :class:`DoomDuelError` after
    stopping both when a seat fails, dies or does not answer within ``timeout`` seconds.
    """

    def __init__(self, port: int, allow_exposed_ports: bool = False) -> None:
        self.port = port  # the host's UDP port
        self.allow_exposed_ports = allow_exposed_ports
        self.work_dir = tempfile.mkdtemp(prefix="sampleforge_doom_duel_")
        self._processes: list[SeatProcess] = []
        # Runs on stop(), or when these seats are garbage-collected or Python exits without it.
        # It holds the very list the seats are appended to, so a failed second spawn stops the
        # first.
        self._release = weakref.finalize(
            self, _stop_seat_processes, self._processes, self.work_dir, CLOSE_GRACE_SECONDS
        )

    @classmethod
    def start(
        cls,
        game: SeatGameSettings,
        seed: int | None,
        *,
        port: int | None,
        connect_timeout: float,
        allow_exposed_ports: bool = False,
    ) -> tuple[DuelSeats, list[SeatReply]]:
        """Start both seats and wait until their games are connected; returns the seats and
        both games' first replies. ``port`` None picks a free one. Where no private network
        namespace can be made, raises :class:`DoomDuelExposedError` before anything starts,
        unless ``allow_exposed_ports`` (see :func:`network_isolation`).

        A start is repeated on a fresh port (up to START_ATTEMPTS in all) when a game dies while
        starting, but not when the games fail to connect in time, nor on a given ``port``: two
        engines starting at the same moment can clash over their IPC names ("File exists"), or
        another program can take the probed port. Names that killed engines left behind are
        removed first."""
        network_isolation(allow_exposed_ports)  # refused: raise before anything starts
        remove_orphan_engine_ipc()
        started = time.monotonic()
        attempt = (game, seed, port, connect_timeout, allow_exposed_ports)
        for _ in range(START_ATTEMPTS - 1):
            try:
                return cls._start_once(*attempt)
            except DoomDuelConnectionError:
                if port is not None or time.monotonic() - started >= connect_timeout:
                    raise
        return cls._start_once(*attempt)

    @classmethod
    def _start_once(
        cls,
        game: SeatGameSettings,
        seed: int | None,
        port: int | None,
        connect_timeout: float,
        allow_exposed_ports: bool,
    ) -> tuple[DuelSeats, list[SeatReply]]:
        seats = cls(port if port is not None else free_udp_port(), allow_exposed_ports)
        try:
            return seats, seats._connect(game, seed, connect_timeout)
        except BaseException:
            seats.stop()
            raise

    def _connect(
        self, game: SeatGameSettings, seed: int | None, connect_timeout: float
    ) -> list[SeatReply]:
        """Spawn both seat processes and wait for both games to be in the netgame."""
        try:
            for seat in range(NUM_SEATS):
                config = self._seat_config(seat, game, seed, connect_timeout)
                self._processes.append(
                    SeatProcess.spawn(seat, self.work_dir, config, self._namespace_step(seat))
                )
            return self._gather(connect_timeout, "connect")
        except DoomDuelError as error:
            raise DoomDuelConnectionError(
                f"doom_duel: the two game instances did not connect on UDP port {self.port} of "
                f"{LOOPBACK} within {connect_timeout:g} s ({error})"
            ) from None

    def _namespace_step(self, seat: int) -> Callable[[], None] | None:
        """What seat `seat`'s process does before it starts: the host makes the duel's private
        network namespace, the joiner enters it (None where namespaces are refused and the
        exposure allowed)."""
        found = network_isolation(self.allow_exposed_ports)
        if found is None:
            return None
        if seat == 0:
            return new_namespace_step(found.user_namespace)
        return enter_namespace_of(self._processes[0].process.pid, found.user_namespace)

    def _seat_config(
        self, seat: int, game: SeatGameSettings, seed: int | None, connect_timeout: float
    ) -> SeatConfig:
        return SeatConfig(
            seat=seat,
            game=game,
            game_args=seat_game_args(seat, self.port, connect_timeout),
            ini_path=f"{self.work_dir}/seat{seat}.ini",
            seed=seed,
        )

    def reset(self, seed: int | None, timeout: float) -> list[SeatReply]:
        """Both games restart the match (with ``seed``, if given)."""
        return self._exchange([("reset", seed)] * NUM_SEATS, timeout, "reset")

    def step(self, buttons: list[list[float]], timeout: float) -> list[SeatReply]:
        """Each seat holds its ``buttons`` for ``frameskip`` tics; both games advance together."""
        return self._exchange([("step", b) for b in buttons], timeout, "step")

    def stop(self, grace: float = CLOSE_GRACE_SECONDS) -> None:
        """Ask both seats to close their games, give them ``grace`` seconds together, kill what
        is left and remove the duel's folder. Idempotent."""
        if self._release.detach() is not None:  # a finalizer detaches at most once
            _stop_seat_processes(self._processes, self.work_dir, grace)

    def _exchange(
        self, commands: list[tuple[str, object]], timeout: float, what: str
    ) -> list[SeatReply]:
        """Send one command to each seat, then wait for both replies."""
        for process, command in zip(self._processes, commands):
            try:
                process.connection.send(command)
            except OSError:
                pass  # the seat died; _gather reports it
        return self._gather(timeout, what)

    def _gather(self, timeout: float, what: str) -> list[SeatReply]:
        """Both seats' replies; on any failure both games are stopped and DoomDuelError raised."""
        try:
            return _gather_replies(self._processes, timeout, what)
        except DoomDuelError:
            # A seat that failed or hangs will not close its game: no grace, kill both now.
            self.stop(grace=0.0)
            raise


@dataclass
class SeatProcess:
    """A running seat process and the env's end of its connection."""

    seat: int
    process: subprocess.Popen
    connection: Connection
    log_path: str

    @classmethod
    def spawn(
        cls,
        seat: int,
        work_dir: str,
        config: SeatConfig,
        before_exec: Callable[[], None] | None = None,
    ) -> SeatProcess:
        """Start the process of ``seat`` in ``work_dir`` (running ``before_exec`` in the child
        first) and send it ``connect``."""
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
                preexec_fn=before_exec,
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
        # the seat holds (also when its engine died, or the seat is killed while closing).
        # The group is stopped first: a seat still starting its game would otherwise create
        # names between our look and the kill. Signalling the group while the seat process is
        # unreaped is safe: its id, which is the group's id, cannot belong to anyone else yet.
        _signal_group(self.process.pid, signal.SIGSTOP)
        engines = seat_engines(self.process.pid)
        _signal_group(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.connection.close()
        remove_engine_ipc(engines)


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group has ended


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


def _gather_replies(seats: list[SeatProcess], timeout: float, what: str) -> list[SeatReply]:
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
            seat = by_connection[cast(Connection, connection)]
            try:
                status, payload = seat.connection.recv()
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


def _stop_seat_processes(seats: list[SeatProcess], work_dir: str, grace: float) -> None:
    """Stop every seat: ask all, give them ``grace`` seconds together, kill what is left."""
    for seat in seats:
        seat.ask_to_close()
    deadline = time.monotonic() + grace
    for seat in seats:
        seat.kill(deadline)
    # The engines save their settings while closing, so the folder goes after them.
    shutil.rmtree(work_dir, ignore_errors=True)
