"""Unit tests for ``sampleforge.envs.doom.loopback_netns`` and the duel's refusal to run exposed
(``duel_seats.network_isolation``), without a game: what the namespaces give a listening socket.

A listener stands in for ZDoom's host game: it binds every interface, as the engine does, in the
namespace a host seat gets; a joiner enters that namespace as the joining seat does and talks to
it over 127.0.0.1. The route without CAP_SYS_ADMIN is tested twice: as root with the plain
``unshare(CLONE_NEWNET)`` made to fail with EPERM, and for real, in a forked child that drops to
uid 65534 (nobody) before it does anything. Both need unprivileged user namespaces, which most
kernels allow; where the kernel refuses them the test cannot run (CI runs as root: it fails).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import struct
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from sampleforge.envs.doom import duel_seats, loopback_netns
from sampleforge.envs.doom.duel_seats import (
    ALLOW_EXPOSED_PORTS_VARIABLE,
    DoomDuelExposedError,
    network_isolation,
)
from sampleforge.testing.ci import unavailable

NOBODY = 65534
NESTED = loopback_netns.CLONE_NEWUSER | loopback_netns.CLONE_NEWNET
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_DUMPABLE = 4
REPLY_TIMEOUT_SECONDS = 10.0


@pytest.fixture(autouse=True)
def fresh_isolation() -> Iterator[None]:
    """Each test finds its own route: ``isolation()`` is cached per process."""
    loopback_netns.isolation.cache_clear()
    duel_seats._warned.clear()
    yield
    loopback_netns.isolation.cache_clear()
    duel_seats._warned.clear()


def refuse_plain_netns(monkeypatch: pytest.MonkeyPatch, also_nested: bool = False) -> None:
    """Make ``unshare(CLONE_NEWNET)`` alone fail with EPERM, as without CAP_SYS_ADMIN (and the
    nested route too, if ``also_nested``). Forked children inherit the patch."""
    unshare = loopback_netns._unshare

    def refusing(flags: int, what: str) -> None:
        if flags == loopback_netns.CLONE_NEWNET or also_nested:
            raise OSError(errno.EPERM, f"{what}: {os.strerror(errno.EPERM)}")
        unshare(flags, what)

    monkeypatch.setattr(loopback_netns, "_unshare", refusing)


def _child(body) -> int:  # type: ignore[no-untyped-def]
    """Fork a child that runs ``body()`` and exits (status 0 if it returned)."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            body()
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    return pid


def _send(fd: int, *values: int) -> None:
    os.write(fd, struct.pack(f"{len(values)}q", *values))


def _receive(fd: int, count: int) -> tuple[int, ...]:
    data = b""
    while len(data) < 8 * count:
        chunk = os.read(fd, 8 * count - len(data))
        if not chunk:
            raise EOFError("the controller ended without a report")
        data += chunk
    return struct.unpack(f"{count}q", data)


def start_duel_stand_in(as_user: int | None) -> dict[str, int]:
    """Fork a controller (dropped to ``as_user``, if given) that does what a duel's seats do:
    finds a route, starts a listener on every interface of a new namespace, and a joiner in
    that namespace that connects to it over 127.0.0.1. Returns the report (route: 1 nested,
    0 plain, -1 none, and then whether the kernel allows the nested one; the listener's pid and
    port; whether the joiner got the listener's answer) while the listener still runs; closing
    the returned ``done`` descriptor ends it all."""
    report_read, report_write = os.pipe()
    done_read, done_write = os.pipe()

    def listener(user_namespace: bool, port_write: int) -> None:
        os.close(report_write)  # the test learns of a failed controller by the pipe's end
        loopback_netns.new_namespace_step(user_namespace)()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("", 0))  # every interface, as ZDoom binds its netgame port
            server.listen()
            _send(port_write, server.getsockname()[1])
            server.settimeout(REPLY_TIMEOUT_SECONDS)
            connection, _ = server.accept()
            with connection:
                connection.sendall(connection.recv(16).upper())
            os.read(done_read, 1)  # until the test is done looking

    def joiner(listener_pid: int, user_namespace: bool, port: int) -> None:
        os.close(report_write)
        loopback_netns.enter_namespace_of(listener_pid, user_namespace)()
        with socket.create_connection(("127.0.0.1", port), REPLY_TIMEOUT_SECONDS) as client:
            client.sendall(b"ping")
            if client.recv(16) != b"PING":
                raise RuntimeError("no answer")

    def controller() -> None:
        os.close(done_write)
        if as_user is not None:
            os.setgroups([])
            os.setgid(as_user)
            os.setuid(as_user)  # from root to another uid: every capability is dropped
            # A change of uid also makes the process non-dumpable, which gives its /proc files
            # (uid_map among them) to root; a user's own process, as sampleforge runs for a
            # user, is dumpable.
            _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        found = loopback_netns.isolation()
        if found.problem is not None:
            # Tell the test whether the kernel would have allowed the nested route, asked
            # directly, so that a route not taken is not mistaken for a kernel's refusal.
            asked = _child(lambda: os._exit(_libc.unshare(NESTED) and 1))
            allowed = os.waitstatus_to_exitcode(os.waitpid(asked, 0)[1]) == 0
            _send(report_write, -1, int(allowed), 0, 0, 0, os.getuid())
            return
        port_read, port_write = os.pipe()
        listener_pid = _child(lambda: listener(found.user_namespace, port_write))
        os.close(port_write)  # so that a listener that fails ends our wait for its port
        (port,) = _receive(port_read, 1)
        joiner_pid = _child(lambda: joiner(listener_pid, found.user_namespace, port))
        joined = os.waitstatus_to_exitcode(os.waitpid(joiner_pid, 0)[1]) == 0
        route = int(found.user_namespace)
        _send(report_write, route, 1, listener_pid, port, int(joined), os.getuid())
        os.waitpid(listener_pid, 0)

    pid = _child(controller)
    os.close(report_write)
    os.close(done_read)
    try:
        route, allowed, listener_pid, port, joined, uid = _receive(report_read, 6)
    except EOFError:
        os.close(done_write)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(report_read)
    return {
        "controller": pid,
        "route": route,
        "kernel_allows_nested": allowed,
        "listener": listener_pid,
        "port": port,
        "joined": joined,
        "uid": uid,
        "done": done_write,
    }


def tcp_listening_ports(pid: int | str) -> set[int]:
    """Local ports of listening TCP sockets in the network namespace of process ``pid``."""
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def interfaces(pid: int | str) -> set[str]:
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return {line.split(":")[0].strip() for line in lines}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "who", ["root", "root_without_cap_sys_admin", "nobody_without_any_capability"]
)
def test_a_listener_on_every_interface_is_reachable_only_inside_the_duels_namespace(
    who: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop privilege or to make a network namespace")
    if who == "root_without_cap_sys_admin":
        refuse_plain_netns(monkeypatch)
    stand_in = start_duel_stand_in(as_user=NOBODY if who.startswith("nobody") else None)
    try:
        if stand_in["route"] < 0:
            assert not stand_in["kernel_allows_nested"], "no route found, yet the kernel allows one"
            unavailable("the kernel refuses unprivileged user namespaces")
        assert stand_in["uid"] == (NOBODY if who.startswith("nobody") else 0)
        assert stand_in["route"] == (who != "root")  # the nested route without CAP_SYS_ADMIN
        listener, port = stand_in["listener"], stand_in["port"]
        # The joiner reached it over the namespace's loopback...
        assert stand_in["joined"] == 1
        assert interfaces(listener) == {"lo"}
        assert loopback_netns.namespace_of(listener) != loopback_netns.namespace_of()
        assert port in tcp_listening_ports(listener)
        # ...and this machine's namespace does not reach it at all.
        assert port not in tcp_listening_ports("self")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), 2.0).close()
        own_user_namespace = loopback_netns.namespace_of(kind="user")
        assert (loopback_netns.namespace_of(listener, "user") != own_user_namespace) == (
            who != "root"
        )
    finally:
        os.close(stand_in["done"])
        status = os.waitpid(stand_in["controller"], 0)[1]
    assert os.waitstatus_to_exitcode(status) == 0


def test_where_both_routes_are_refused_the_duel_is_refused_in_one_line_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refuse_plain_netns(monkeypatch, also_nested=True)
    with pytest.raises(DoomDuelExposedError) as refused:
        network_isolation(allow_exposed_ports=False)
    message = str(refused.value)
    assert "\n" not in message
    assert "allow_exposed_ports=True" in message and f"{ALLOW_EXPOSED_PORTS_VARIABLE}=1" in message
    assert "unshare(CLONE_NEWNET)" in message  # the kernel's reasons, not subprocess's
    assert "unshare(CLONE_NEWUSER | CLONE_NEWNET)" in message


def test_where_both_routes_are_refused_the_flag_runs_the_duel_exposed_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refuse_plain_netns(monkeypatch, also_nested=True)
    with caplog.at_level(logging.WARNING, logger=duel_seats.__name__):
        assert network_isolation(allow_exposed_ports=True) is None
        assert network_isolation(allow_exposed_ports=True) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "listens on every interface" in warnings[0], warnings


def test_the_registered_duel_takes_the_flag_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sampleforge.envs.doom.duel_env import exposure_allowed_by_environment

    for value, allowed in [("", False), ("0", False), ("no", False), ("1", True), ("TRUE", True)]:
        monkeypatch.setenv(ALLOW_EXPOSED_PORTS_VARIABLE, value)
        assert exposure_allowed_by_environment() is allowed
    monkeypatch.delenv(ALLOW_EXPOSED_PORTS_VARIABLE)
    assert exposure_allowed_by_environment() is False
    monkeypatch.setenv(ALLOW_EXPOSED_PORTS_VARIABLE, "maybe")
    with pytest.raises(ValueError, match=r"'maybe': allowed are 1, true, yes or 0, false, no"):
        exposure_allowed_by_environment()
