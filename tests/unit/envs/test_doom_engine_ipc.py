"""Cleaning up the /dev/shm names killed ViZDoom engines leave behind (the last test starts a real
game; the others need no vizdoom)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sampleforge.envs.doom import engine_ipc


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(engine_ipc, "SHM", folder)
    return folder


def _names(instance: str, shm: Path, age_sec: float) -> None:
    for kind in ("MQCtr", "MQDoom"):
        path = shm / f"ViZDoom{kind}{instance}"
        path.write_bytes(b"")
        then = time.time() - age_sec
        os.utime(path, (then, then))


@pytest.fixture
def fake_engine(tmp_path: Path):
    """A live process that looks like a vizdoom engine with instance id "LiveEngine"."""
    exe = tmp_path / "bin" / "vizdoom"
    exe.parent.mkdir()
    exe.symlink_to(sys.executable)
    process = subprocess.Popen(
        [str(exe), "-c", "import time; time.sleep(60)", "+viz_instance_id", "LiveEngine"]
    )
    try:
        deadline = time.monotonic() + 10
        while "LiveEngine" not in engine_ipc.engine_instance_ids():
            assert time.monotonic() < deadline, "the fake engine never showed up in /proc"
            time.sleep(0.05)
        yield process
    finally:
        process.kill()
        process.wait()


def test_live_engines_are_found_by_their_instance_id_and_group(fake_engine) -> None:
    assert "LiveEngine" in engine_ipc.engine_instance_ids(os.getpgid(fake_engine.pid))
    assert "LiveEngine" not in engine_ipc.engine_instance_ids(group=-1)


def test_only_old_names_of_engines_that_are_gone_are_removed(shm: Path, fake_engine) -> None:
    _names("DeadEngine", shm, age_sec=3600)
    _names("Starting00", shm, age_sec=1)  # its game may not have started its engine yet
    _names("LiveEngine", shm, age_sec=3600)
    removed = engine_ipc.remove_orphan_engine_ipc()
    assert removed == ["DeadEngine"]
    assert sorted(p.name for p in shm.iterdir()) == [
        "ViZDoomMQCtrLiveEngine",
        "ViZDoomMQCtrStarting00",
        "ViZDoomMQDoomLiveEngine",
        "ViZDoomMQDoomStarting00",
    ]


def test_removing_names_that_are_already_gone_is_fine(shm: Path) -> None:
    engine_ipc.remove_engine_ipc(["NeverThere"])
    assert list(shm.iterdir()) == []


def test_the_names_a_process_maps_or_holds_open_give_its_engines_ids(shm: Path) -> None:
    # A game's controller maps its engine's names, and holds each open before mapping it;
    # other files in the folder, mapped or not, and names merely present are not its engine's.
    import mmap

    for name in (
        "ViZDoomSMMine01",
        "ViZDoomMQCtrMine01",
        "ViZDoomMQDoomMine02",
        "ViZDoomMQCtrOpenOnly",
        "other",
        "ViZDoomSMNotMapped",
    ):
        (shm / name).write_bytes(b"\0" * 4096)
    maps = []
    try:
        for name in ("ViZDoomSMMine01", "ViZDoomMQCtrMine01", "ViZDoomMQDoomMine02", "other"):
            with open(shm / name, "r+b") as f:
                maps.append(mmap.mmap(f.fileno(), 4096))
        with open(shm / "ViZDoomMQCtrOpenOnly", "rb"):
            held = engine_ipc.engine_ipc_held_by(os.getpid())
        assert held == ["Mine01", "Mine02", "OpenOnly"]
        assert engine_ipc.engine_ipc_held_by(os.getpid()) == ["Mine01", "Mine02"]
    finally:
        for m in maps:
            m.close()
    assert engine_ipc.engine_ipc_held_by(os.getpid()) == []


def test_a_removed_name_still_mapped_is_not_reported(shm: Path) -> None:
    import mmap

    path = shm / "ViZDoomSMGone01"
    path.write_bytes(b"\0" * 4096)
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 4096)
    try:
        path.unlink()
        assert engine_ipc.engine_ipc_held_by(os.getpid()) == []
    finally:
        mapped.close()


def test_a_process_that_is_gone_holds_nothing() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert engine_ipc.engine_ipc_held_by(process.pid) == []


def test_a_doom_game_removes_old_orphan_names_before_its_engine_starts(shm: Path) -> None:
    """What the cleanup is for: a killed engine's names are gone once the next game starts."""
    from sampleforge.envs.doom import make_doom_env
    from sampleforge.envs.registry import EnvContext

    _names("KilledLongAgo", shm, age_sec=3600)
    env = make_doom_env("doom_basic", EnvContext(seed=0))
    try:
        env.reset(seed=0)
        assert list(shm.iterdir()) == []
    finally:
        env.close()
