"""Unit tests for ``doom_duel`` (sampleforge.envs.doom.duel_env, duel_seats, duel_seat_server):
the MultiAgentEnv contract over two VizDoom instances in lockstep, process cleanup after close
and after a failed connection, two duels at once, and a short multi-agent training run.

Processes are told apart from other VizDoom users on the machine by where they live: every duel
gets its temporary folder under this test's ``tmp_path`` (``tempfile.tempdir`` / ``TMPDIR``),
the seat processes run in it and the engines' command lines name it. Tests that start a game are
skipped without vizdoom; the pure ones always run.
"""

from __future__ import annotations

import errno
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from sampleforge.envs import EnvContext, env_info, make_env, resolve_env
from sampleforge.envs.doom import duel_seats, loopback_netns
from sampleforge.envs.doom.duel_env import DoomDuelEnv, hud_values, make_doom_duel, match_outcome
from sampleforge.envs.doom.duel_seats import (
    DoomDuelConnectionError,
    DoomDuelExposedError,
    free_udp_port,
    seat_game_args,
)
from sampleforge.envs.doom.engine_ipc import engine_ipc_held_by
from sampleforge.envs.doom.measurements import MEASUREMENT_NAMES
from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.testing.ci import unavailable

needs_vizdoom = pytest.mark.skipif(
    find_spec("vizdoom") is None or find_spec("cv2") is None,
    reason="needs the doom extra: pip install 'sampleforge[doom]'",
)

SHORT_MATCH_SECONDS = 4.0  # 140 tics = 70 agent steps per match


def engine_names() -> set[str]:
    return {path.name for path in Path("/dev/shm").glob("ViZDoom*")}


def orphan_engine_names(before: set[str]) -> set[str]:
    """Engine names in /dev/shm, not there ``before``, that no live process holds: left behind.
    (Names a live process holds belong to a game still running, perhaps another test's.)"""
    held = set()
    for proc in Path("/proc").glob("[0-9]*"):
        held.update(engine_ipc_held_by(int(proc.name)))
    return {name for name in engine_names() - before if not name.endswith(tuple(held))}


@pytest.fixture(autouse=True)
def no_engine_names_left() -> Iterator[None]:
    """Every test leaves /dev/shm as it found it: games closed, starts that failed (and were
    retried without a word), seats killed while closing or with their env process."""
    before = engine_names()
    yield
    deadline = time.monotonic() + 5.0
    while (left := orphan_engine_names(before)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"left in /dev/shm: {sorted(left)}"


@pytest.fixture
def duel_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's duels put their temporary folders (and nothing else does)."""
    root = tmp_path / "duels"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def duel_processes(root: Path) -> list[str]:
    """Live processes of duels under ``root``: seat processes (their working directory is a
    duel's folder) and engines (their command line names it). As ``"pid name"``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z" or int(proc.name) == os.getpid():
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(proc / "cwd")
        except (OSError, ValueError):
            continue  # ended while we looked, or not ours to read
        if str(root) in cmdline or cwd.startswith(str(root)):
            found.append(f"{proc.name} {stat[stat.index('(') + 1 : stat.rindex(')')]}")
    return found


def engine_instance_ids(root: Path) -> list[str]:
    """The ``+viz_instance_id`` of every engine of a duel under ``root``."""
    ids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "+viz_instance_id" in args and any(str(root) in arg for arg in args):
            ids.append(args[args.index("+viz_instance_id") + 1])
    return ids


def ipc_files(instance_ids: list[str]) -> list[str]:
    return [
        f.name for f in Path("/dev/shm").glob("ViZDoom*") if f.name.endswith(tuple(instance_ids))
    ]


def wait_until_gone(root: Path, seconds: float = 3.0) -> list[str]:
    """Processes of duels under ``root`` still alive after up to ``seconds`` (killed ones take a
    moment to be reaped by whoever inherits them)."""
    deadline = time.monotonic() + seconds
    while (alive := duel_processes(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def random_actions(env: DoomDuelEnv) -> list[Any]:
    return [env.action_space.sample() for _ in range(env.num_agents)]


# --------------------------------------------------------------------------- pure: no game


def test_doom_duel_is_registered_multi_agent_with_frameskip_2() -> None:
    spec = resolve_env("doom_duel")
    assert spec.multi_agent and spec.frameskip == 2
    # Worker processes receive the factory pickled.
    assert pickle.loads(pickle.dumps(spec.factory)) is make_doom_duel


def test_match_outcome_more_frags_wins_and_a_tie_is_half() -> None:
    assert match_outcome([3.0, 1.0]) == [1.0, 0.0]
    assert match_outcome([-1.0, 0.0]) == [0.0, 1.0]  # a suicide loses a frag
    assert match_outcome([2.0, 2.0]) == [0.5, 0.5]


def test_seat_0_hosts_and_seat_1_joins_the_same_port_on_loopback() -> None:
    host, joiner = seat_game_args(0, 40123, 30.0), seat_game_args(1, 40123, 30.0)
    assert "-host 2 -port 40123" in host and "-deathmatch" in host and "-join" not in host
    assert "-join 127.0.0.1 -port 40123" in joiner and "-host" not in joiner
    assert "+colorset 0" in host and "+colorset 3" in joiner


def test_free_udp_port_can_be_bound() -> None:
    import socket

    port = free_udp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("", port))


def test_hud_shows_no_negative_health() -> None:
    variables = dict.fromkeys(MEASUREMENT_NAMES, 1.0) | {"HEALTH": -999900.0, "FRAGCOUNT": -1.0}
    values = dict(zip(MEASUREMENT_NAMES, hud_values(variables)))
    assert values["HEALTH"] == 0.0 and values["FRAGCOUNT"] == -1.0


# --------------------------------------------------------------------------- with the game


@needs_vizdoom
def test_spaces_need_no_game_process(duel_root: Path) -> None:
    info = env_info("doom_duel")
    assert info.num_agents == 2
    assert info.observation_space["obs"].shape == (3, 72, 128)
    assert info.observation_space["measurements"].shape == (len(MEASUREMENT_NAMES),)
    assert len(info.action_space) == 7
    assert set(info.reward_shaping) >= {"frag", "death", "damage_dealt", "weapon_pickup"}
    assert duel_processes(duel_root) == []


@needs_vizdoom
@pytest.mark.timeout(60)
def test_contract_over_matches_with_random_actions_then_nothing_left(duel_root: Path) -> None:
    env = make_env("doom_duel", EnvContext(seed=0))
    env.close()  # a throwaway instance: no process was ever started
    env = DoomDuelEnv(match_seconds=SHORT_MATCH_SECONDS)
    assert isinstance(env, MultiAgentEnv)
    env.action_space.seed(0)
    # Seat 1 pays dearly for every weapon switch; seat 0 keeps the defaults.
    env.set_reward_shaping(1, {"weapon_switch": -10.0})
    try:
        observations, infos = env.reset(seed=3)
        engines = engine_instance_ids(duel_root)
        alive = duel_processes(duel_root)
        assert len(engines) == 2 and sum("vizdoom" in p for p in alive) == 2, alive
        assert len(alive) == 4, alive  # two seat processes, two engines
        for seat_pid in (p.split()[0] for p in alive if "vizdoom" not in p):
            # Seat processes skip sampleforge's registry, hence torch (see _SEAT_BOOTSTRAP in
            # duel_seats.py).
            assert "libtorch" not in Path(f"/proc/{seat_pid}/maps").read_text()
        assert len(observations) == len(infos) == 2
        assert all(env.observation_space.contains(obs) for obs in observations)
        returns, steps, outcomes = np.zeros(2), 0, []
        for _match in range(3):
            while True:
                observations, rewards, terminated, truncated, infos = env.step(random_actions(env))
                steps += 1
                assert all(env.observation_space.contains(obs) for obs in observations)
                assert rewards.shape == (2,) and terminated.shape == truncated.shape == (2,)
                assert all(info["game_variables"]["PLAYER_COUNT"] == 2 for info in infos)
                returns += rewards
                done = terminated | truncated
                assert done[0] == done[1]  # one match, so both seats finish together
                if done.all():
                    break
                assert all("win" not in info for info in infos)
            assert truncated.all() and not terminated.any()  # the time limit ended it
            wins = [info["win"] for info in infos]
            assert sum(wins) == 1.0 and wins == match_outcome([i["frags"] for i in infos])
            outcomes.append(wins)
            # Finished: placeholder observations, zero rewards, done flags, until the reset.
            again = env.step(random_actions(env))
            assert np.all(again[1] == 0.0) and again[3].all()
            observations, _ = env.reset()
            assert all(env.observation_space.contains(obs) for obs in observations)
        assert steps == 3 * round(SHORT_MATCH_SECONDS * 35 / 2)  # frameskip 2, lockstep
        assert returns[1] < returns[0] - 1.0, returns  # each seat has its own weights
    finally:
        env.close()
    assert wait_until_gone(duel_root) == []
    assert ipc_files(engines) == []  # the engines removed their shared memory
    env.close()  # idempotent


@needs_vizdoom
@pytest.mark.exclusive  # a wall-clock bound on the connection timeout
@pytest.mark.timeout(60)
@pytest.mark.parametrize("failure", ["joiner_on_wrong_port", "tiny_timeout"])
def test_failed_connection_raises_a_clear_error_and_leaves_nothing(
    failure: str, duel_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout = 3.0 if failure == "joiner_on_wrong_port" else 0.3
    if failure == "joiner_on_wrong_port":

        def wrong_port_for_the_joiner(seat: int, port: int, connect_timeout: float) -> str:
            return seat_game_args(seat, port + seat, connect_timeout)

        monkeypatch.setattr(duel_seats, "seat_game_args", wrong_port_for_the_joiner)
    cleaned: list[str] = []

    def recording_remove(instance_ids: list[str]) -> None:
        cleaned.extend(instance_ids)
        remove_ipc(instance_ids)

    remove_ipc = duel_seats.remove_engine_ipc
    monkeypatch.setattr(duel_seats, "remove_engine_ipc", recording_remove)
    port = free_udp_port()
    names_before = set(Path("/dev/shm").glob("ViZDoom*"))  # exclusive: no other test runs
    env = DoomDuelEnv(connect_timeout=timeout, port=port)
    start = time.monotonic()
    with pytest.raises(DoomDuelConnectionError) as error:
        env.reset()
    elapsed = time.monotonic() - start
    message = str(error.value)
    assert f"UDP port {port}" in message and "\n" not in message, message
    assert f"within {timeout:g} s" in message
    assert elapsed < timeout + 10.0, elapsed  # the timeout is what ends it, not the load
    assert wait_until_gone(duel_root) == []
    if failure == "joiner_on_wrong_port":
        # The host's engine was waiting when killed and is cleaned up; so is the joiner's,
        # unless on a loaded machine it had not started (then it had made no names either).
        assert 1 <= len(cleaned) <= 2 and ipc_files(cleaned) == []
    assert set(Path("/dev/shm").glob("ViZDoom*")) - names_before == set()
    env.close()


@needs_vizdoom
@pytest.mark.timeout(120)
def test_seats_killed_while_their_games_start_leave_no_names_even_when_looking_is_slow(
    duel_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A seat creates its engine's names while its game starts. Killing it means finding those
    # names (a scan of /proc, slow on a loaded machine) and then killing: a seat left running
    # meanwhile created names nobody removed (CI, 2026-11-27). Timeouts from 0.1 to 0.85 s land
    # the kill all over the start; a slow look makes the gap wide enough to be hit every time.
    looked = duel_seats.seat_engines

    def slow_look(seat_pid: int) -> list[str]:
        found = looked(seat_pid)
        time.sleep(0.2)
        return found

    monkeypatch.setattr(duel_seats, "seat_engines", slow_look)
    for timeout in np.arange(0.1, 0.9, 0.15):  # steps shorter than the slow look
        before = engine_names()
        env = DoomDuelEnv(connect_timeout=float(timeout), port=free_udp_port())
        try:
            env.reset()
        except DoomDuelConnectionError:
            pass  # the point: killed mid-start (a fast machine may connect in time)
        env.close()
        assert wait_until_gone(duel_root) == []
        assert orphan_engine_names(before) == set(), f"timeout {timeout:.2f} s"


@needs_vizdoom
@pytest.mark.timeout(60)
def test_two_duels_at_once_on_different_ports(duel_root: Path) -> None:
    envs = [DoomDuelEnv(match_seconds=SHORT_MATCH_SECONDS) for _ in range(2)]
    try:
        for i, env in enumerate(envs):
            env.action_space.seed(i)
            env.reset(seed=i)
        assert len(duel_processes(duel_root)) == 8
        ports = [env.host_port for env in envs]
        assert None not in ports and ports[0] != ports[1]
        for _ in range(40):  # interleaved: neither duel waits for the other
            for env in envs:
                observations, _, terminated, truncated, _ = env.step(random_actions(env))
                assert all(env.observation_space.contains(obs) for obs in observations)
                assert not (terminated | truncated).any()
    finally:
        for env in envs:
            env.close()
    assert wait_until_gone(duel_root) == []


def udp_ports(pid: int | str) -> set[int]:
    """Local ports of the UDP sockets in the network namespace of process ``pid``."""
    lines = Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]
    return {int(line.split()[1].split(":")[1], 16) for line in lines}


def interfaces(pid: int | str) -> set[str]:
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return {line.split(":")[0].strip() for line in lines}


@pytest.fixture
def fresh_isolation() -> Iterator[None]:
    """A test that changes what the kernel allows finds its own route (cached per process)."""
    loopback_netns.isolation.cache_clear()
    yield
    loopback_netns.isolation.cache_clear()


def refuse_unshare(monkeypatch: pytest.MonkeyPatch, *, also_nested: bool) -> None:
    """``unshare(CLONE_NEWNET)`` alone fails with EPERM, as without CAP_SYS_ADMIN (the nested
    route too, if ``also_nested``); forked seat processes inherit the patch."""
    unshare = loopback_netns._unshare

    def refusing(flags: int, what: str) -> None:
        if flags == loopback_netns.CLONE_NEWNET or also_nested:
            raise OSError(errno.EPERM, f"{what}: {os.strerror(errno.EPERM)}")
        unshare(flags, what)

    monkeypatch.setattr(loopback_netns, "_unshare", refusing)


@needs_vizdoom
@pytest.mark.timeout(60)
@pytest.mark.parametrize("privilege", ["cap_sys_admin", "no_cap_sys_admin"])
def test_the_games_listen_only_in_the_duels_private_loopback_namespace(
    privilege: str, duel_root: Path, monkeypatch: pytest.MonkeyPatch, fresh_isolation: None
) -> None:
    """Issue 14.3: ZDoom binds the host port on every interface, so the games run in a network
    namespace of their own whose only interface is loopback. Issue 40.9: without CAP_SYS_ADMIN
    too, inside a user namespace of their own (tests/unit/envs/test_doom_loopback_netns.py
    drops privilege for real, without a game)."""
    if privilege == "no_cap_sys_admin":
        refuse_unshare(monkeypatch, also_nested=False)
    problem = loopback_netns.isolation_problem()
    if problem is not None:
        unavailable(problem)  # CI runs as root: there it fails instead
    assert loopback_netns.isolation().user_namespace == (privilege == "no_cap_sys_admin")
    env = DoomDuelEnv(match_seconds=SHORT_MATCH_SECONDS)
    try:
        env.reset(seed=0)
        port = env.host_port
        pids = [int(p.split()[0]) for p in duel_processes(duel_root)]
        assert len(pids) == 4  # two seats, two engines
        namespaces = {loopback_netns.namespace_of(pid) for pid in pids}
        assert len(namespaces) == 1 and loopback_netns.namespace_of() not in namespaces
        user_namespaces = {loopback_netns.namespace_of(pid, "user") for pid in pids}
        ours = loopback_netns.namespace_of(kind="user")
        assert len(user_namespaces) == 1 and (ours in user_namespaces) == (
            privilege == "cap_sys_admin"
        )
        assert interfaces(pids[0]) == {"lo"}
        assert port in udp_ports(pids[0])  # the host's game listens there...
        assert port not in udp_ports("self")  # ...and nowhere this machine's network reaches
        for _ in range(5):  # and the games do play
            env.step(random_actions(env))
    finally:
        env.close()
    assert wait_until_gone(duel_root) == []


@needs_vizdoom
def test_without_any_private_namespace_the_duel_is_refused_before_anything_starts(
    duel_root: Path, monkeypatch: pytest.MonkeyPatch, fresh_isolation: None
) -> None:
    refuse_unshare(monkeypatch, also_nested=True)
    monkeypatch.delenv(duel_seats.ALLOW_EXPOSED_PORTS_VARIABLE, raising=False)
    for build in (DoomDuelEnv, lambda: make_env("doom_duel", EnvContext(seed=0))):
        with pytest.raises(DoomDuelExposedError) as refused:
            build()
        message = str(refused.value)
        assert "\n" not in message and "allow_exposed_ports=True" in message, message
    assert duel_processes(duel_root) == []


@needs_vizdoom
@pytest.mark.timeout(60)
def test_without_any_private_namespace_the_flag_runs_the_duel_exposed_with_a_warning(
    duel_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_isolation: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    refuse_unshare(monkeypatch, also_nested=True)
    monkeypatch.setenv(duel_seats.ALLOW_EXPOSED_PORTS_VARIABLE, "1")  # the registered factory's
    env = make_env("doom_duel", EnvContext(seed=0))
    try:
        with caplog.at_level(logging.WARNING, logger=duel_seats.__name__):
            env.reset(seed=0)
        assert any("listens on every interface" in r.getMessage() for r in caplog.records)
        pids = [int(p.split()[0]) for p in duel_processes(duel_root)]
        assert {loopback_netns.namespace_of(pid) for pid in pids} == {loopback_netns.namespace_of()}
        assert env.host_port in udp_ports("self")  # exposed, as the user accepted
    finally:
        env.close()
    assert wait_until_gone(duel_root) == []


# Run in a separate env process that the test kills: either idle after connecting, or blocked
# while connecting (the joiner contacts the wrong port, and nobody gives up for 60 s).
KILLED_ENV_CODE = {
    "idle": (
        "from sampleforge.envs.doom.duel_env import DoomDuelEnv\n"
        "DoomDuelEnv().reset()\n"
        "import time; time.sleep(60)\n"
    ),
    "connecting": (
        "from sampleforge.envs.doom import duel_seats\n"
        "from sampleforge.envs.doom.duel_env import DoomDuelEnv\n"
        "args = duel_seats.seat_game_args\n"
        "duel_seats.seat_game_args = lambda seat, port, t: args(seat, port + seat, t)\n"
        "DoomDuelEnv(connect_timeout=60).reset()\n"
    ),
}


@needs_vizdoom
@pytest.mark.timeout(60)
@pytest.mark.parametrize("state", sorted(KILLED_ENV_CODE))
def test_games_die_with_a_killed_env_process(state: str, duel_root: Path) -> None:
    # A rollout worker killed with SIGKILL never calls close(). Idle seat processes see their
    # connection close; seats blocked in the engine notice their parent is gone. Either way they
    # kill their process groups, engines included.
    env_vars = os.environ | {"TMPDIR": str(duel_root)}
    process = subprocess.Popen([sys.executable, "-c", KILLED_ENV_CODE[state]], env=env_vars)
    try:
        # Both engines running: counted by their command lines (on a loaded machine a seat
        # may already have forked its engine's process before that process runs vizdoom).
        deadline = time.monotonic() + 30.0
        while (
            sum("vizdoom" in p for p in duel_processes(duel_root)) < 2
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert sum("vizdoom" in p for p in duel_processes(duel_root)) == 2
        engines = engine_instance_ids(duel_root)
        time.sleep(0.5)  # into the sleep, or the connection wait
    finally:
        process.kill()
        process.wait()
    assert wait_until_gone(duel_root, seconds=5.0) == []
    assert len(engines) == 2 and ipc_files(engines) == []  # nothing left in /dev/shm either


@needs_vizdoom
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_doom_duel_trains_through_the_multi_agent_path_and_leaves_no_game(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sampleforge.components.runner import Runner
    from sampleforge.config import make_config

    root = tmp_path / "duels"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))  # read by the (spawned) rollout worker
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # how many duel processes ran at most
        while not stop.is_set():
            seen.append(sum("vizdoom" in p for p in duel_processes(root)))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cfg = make_config(
        env="doom_duel", train_dir=str(tmp_path / "train_dir"), num_policies=2, num_workers=1,
        num_envs_per_worker=2, worker_num_splits=2, rollout=16, batch_size=64,
        num_batches_per_epoch=1, train_for_env_steps=2000, device="cpu", seed=0,
        report_every_sec=60,
    )  # fmt: skip
    try:
        with Runner(cfg) as runner:
            summary = runner.train()
    finally:
        stop.set()
        watcher.join()
    assert summary.env_steps >= 2000, summary
    assert max(seen) == 4, seen  # two duels of two engines each
    assert wait_until_gone(root) == []
    assert not (work / "_vizdoom").exists()  # the engines wrote in their own folders
