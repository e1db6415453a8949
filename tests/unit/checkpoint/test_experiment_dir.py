"""Unit tests for the experiment folder: creation, resume rules, overwrite, one run at a time,
unreadable config.json and disk errors (experiment_dir.py, experiment_lock.py)."""

from __future__ import annotations

import errno
import json
import os
import signal
import time

import pytest

from sampleforge.checkpoint import experiment_dir, experiment_lock
from sampleforge.checkpoint.experiment_dir import (
    FROZEN_ON_RESUME,
    MARKER_FILENAME,
    lock_experiment,
    prepare_experiment,
)
from sampleforge.config import ConfigError, config_from_dict, config_to_dict, make_config
from sampleforge.config.sources import SOURCES_KEY


def _cfg(tmp_path, **overrides):
    # pinned explicitly so that the tests do not depend on the schema's defaults
    settings = dict(
        train_dir=str(tmp_path),
        experiment="exp",
        env="CartPole-v1",
        rnn="none",
        rollout=32,
        batch_size=256,
        learning_rate=1e-3,
    )
    settings.update(overrides)
    return make_config(**settings)


def _settings(saved: dict) -> dict:
    """config.json without its record of where each setting came from."""
    return {k: v for k, v in saved.items() if k != SOURCES_KEY}


def _fake_checkpoint(exp_path):
    path = exp_path / "checkpoints" / "p0" / "checkpoint_000000001_10.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really a checkpoint")
    return path


def test_fresh_experiment_writes_config(tmp_path):
    cfg = _cfg(tmp_path)
    exp, resume = prepare_experiment(cfg)
    assert resume is False
    assert exp.path == tmp_path / "exp"
    assert exp.path.is_dir()
    assert exp.config_path == exp.path / "config.json"
    saved = json.loads(exp.config_path.read_text())
    assert _settings(saved) == config_to_dict(cfg)
    # every setting's source is recorded: the pinned ones as flags, the rest as defaults
    assert saved[SOURCES_KEY]["learning_rate"] == "flag"
    assert saved[SOURCES_KEY]["gamma"] == "default"
    assert set(saved[SOURCES_KEY]) == set(config_to_dict(cfg))
    assert config_from_dict(saved) == cfg
    assert exp.checkpoint_dir(0) == exp.path / "checkpoints" / "p0"
    assert not exp.has_checkpoints()
    # no temporary file is left behind by the atomic write
    assert sorted(p.name for p in exp.path.iterdir()) == [MARKER_FILENAME, "config.json"]


def test_experiment_name_defaults_to_env(tmp_path):
    cfg = make_config(train_dir=str(tmp_path), env="Acrobot-v1")
    exp, _ = prepare_experiment(cfg)
    assert exp.path == tmp_path / "Acrobot-v1"
    assert exp.config_path.exists()


def test_changed_learning_rate_is_allowed_and_resume_follows_checkpoints(tmp_path):
    exp, resume = prepare_experiment(_cfg(tmp_path))
    assert resume is False

    changed = _cfg(tmp_path, learning_rate=5e-4)
    exp2, resume = prepare_experiment(changed)
    assert exp2.path == exp.path
    assert resume is False  # no checkpoints yet
    assert json.loads(exp.config_path.read_text())["learning_rate"] == 5e-4

    _fake_checkpoint(exp.path)
    assert exp.has_checkpoints()
    again = _cfg(tmp_path, learning_rate=2e-4, num_workers=1)
    _, resume = prepare_experiment(again)
    assert resume is True
    saved = json.loads(exp.config_path.read_text())
    assert _settings(saved) == config_to_dict(again)  # config.json holds the latest start's config
    assert (exp.path / "checkpoints" / "p0" / "checkpoint_000000001_10.pt").exists()


def test_unrelated_files_do_not_count_as_checkpoints(tmp_path):
    exp, _ = prepare_experiment(_cfg(tmp_path))
    (exp.path / "checkpoints" / "p0").mkdir(parents=True)
    (exp.path / "checkpoints" / "p0" / "notes.txt").write_text("hi")
    _, resume = prepare_experiment(_cfg(tmp_path))
    assert resume is False


@pytest.mark.parametrize(
    "field, old, new",
    [
        ("env", "CartPole-v1", "MountainCar-v0"),
        ("rnn", "none", "gru"),
        ("rollout", 32, 64),
        ("mlp_hidden_sizes", (64, 64), (32, 32)),
        ("algorithm", "appo", "impala"),
        ("drop_obs_keys", "", "mission"),
        ("num_critics", 2, 3),
        ("critic_hidden_sizes", (256, 256), (64,)),
    ],
)
def test_changing_frozen_setting_is_refused(tmp_path, field, old, new):
    assert field in FROZEN_ON_RESUME
    first = _cfg(tmp_path, **{field: old})
    exp, _ = prepare_experiment(first)
    _fake_checkpoint(exp.path)
    before = exp.config_path.read_bytes()
    listing = sorted(p.relative_to(exp.path) for p in exp.path.rglob("*"))

    with pytest.raises(ConfigError) as info:
        prepare_experiment(_cfg(tmp_path, **{field: new}))
    message = str(info.value)
    assert field in message
    old_repr = list(old) if isinstance(old, tuple) else old  # config.json stores lists
    new_repr = list(new) if isinstance(new, tuple) else new
    assert repr(old_repr) in message and repr(new_repr) in message
    assert "overwrite" in message  # tells the user how to start afresh

    # nothing changed on disk
    assert exp.config_path.read_bytes() == before
    assert sorted(p.relative_to(exp.path) for p in exp.path.rglob("*")) == listing


def test_frozen_setting_refused_even_without_checkpoints(tmp_path):
    exp, _ = prepare_experiment(_cfg(tmp_path))
    before = exp.config_path.read_bytes()
    with pytest.raises(ConfigError, match="CartPole-v1.*Acrobot-v1"):
        prepare_experiment(_cfg(tmp_path, env="Acrobot-v1"))
    assert exp.config_path.read_bytes() == before


def test_several_frozen_changes_are_listed_together(tmp_path):
    prepare_experiment(_cfg(tmp_path))
    with pytest.raises(ConfigError) as info:
        prepare_experiment(_cfg(tmp_path, rnn="lstm", rollout=16, learning_rate=0.01))
    message = str(info.value)
    assert "rnn: 'none' -> 'lstm'" in message
    assert "rollout: 32 -> 16" in message
    assert "learning_rate" not in message  # not frozen, so not a reason to refuse


def test_overwrite_deletes_old_contents(tmp_path):
    exp, _ = prepare_experiment(_cfg(tmp_path))
    ckpt = _fake_checkpoint(exp.path)
    (exp.path / "progress.csv").write_text("old")
    (exp.path / "sub").mkdir()
    (exp.path / "sub" / "file").write_text("old")

    cfg = _cfg(tmp_path, env="MountainCar-v0", restart_behavior="overwrite")
    exp2, resume = prepare_experiment(cfg)
    assert exp2.path == exp.path
    assert resume is False
    assert not ckpt.exists()
    assert not exp.has_checkpoints()
    assert sorted(p.name for p in exp.path.iterdir()) == [MARKER_FILENAME, "config.json"]
    assert _settings(json.loads(exp.config_path.read_text())) == config_to_dict(cfg)


def test_overwrite_of_missing_folder_just_creates_it(tmp_path):
    cfg = _cfg(tmp_path, restart_behavior="overwrite")
    exp, resume = prepare_experiment(cfg)
    assert resume is False and exp.config_path.exists()


def test_other_experiments_are_untouched(tmp_path):
    a, _ = prepare_experiment(make_config(train_dir=str(tmp_path), experiment="a"))
    _fake_checkpoint(a.path)
    prepare_experiment(
        make_config(train_dir=str(tmp_path), experiment="b", restart_behavior="overwrite")
    )
    assert a.has_checkpoints()


def _tree(root) -> list[tuple[str, bytes]]:
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*")
    )


@pytest.mark.parametrize(
    "name", ["..", ".", "../x", "a/b", "/tmp/x", "~", "~user", "a\\b", "  ", "x\0y"]
)
def test_experiment_names_that_could_reach_outside_train_dir_are_refused(tmp_path, name):
    train_dir = tmp_path / "train_dir"
    mine = train_dir / "mine"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("precious")
    (tmp_path / "outside.txt").write_text("precious too")
    before = _tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        make_config(train_dir=str(train_dir), experiment=name, restart_behavior="overwrite")
    message = str(err.value)
    assert "experiment" in message and len(message.splitlines()) == 1
    assert _tree(tmp_path) == before  # nothing on disk changed


def test_overwrite_refuses_a_folder_sampleforge_did_not_make(tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"meow")
    (foreign / "config.json").write_text("{}")  # a config.json alone is not enough
    before = _tree(tmp_path)
    with pytest.raises(ConfigError, match="not a sampleforge experiment folder"):
        prepare_experiment(_cfg(tmp_path, experiment="photos", restart_behavior="overwrite"))
    assert _tree(tmp_path) == before


def test_overwrite_never_follows_a_symlink_out_of_train_dir(tmp_path):
    train_dir, elsewhere = tmp_path / "train_dir", tmp_path / "elsewhere"
    train_dir.mkdir()
    exp, _ = prepare_experiment(_cfg(elsewhere, experiment="real"))  # a real experiment...
    (train_dir / "link").symlink_to(exp.path)  # ...reached through a link in train_dir
    before = _tree(tmp_path)
    with pytest.raises(ConfigError, match="is a symbolic link: refusing"):
        prepare_experiment(_cfg(train_dir, experiment="link", restart_behavior="overwrite"))
    assert _tree(tmp_path) == before


# --- one run per experiment (experiment_lock.py) ------------------------------------------------


def _fork(work) -> tuple[int, int]:
    """Run `work(write_fd)` in a forked child (cheaper than a new interpreter, which would
    import torch again); returns its pid and the read end of its pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            work(write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def _hold_with_a_forked_helper(train_dir):
    """Another run: holds the lock and has forked a helper (as an env may) that keeps the lock
    file open; writes the helper's pid, then waits to be killed."""

    def work(write_fd: int) -> None:
        lock = experiment_lock.ExperimentLock.acquire(train_dir, "exp")
        helper = os.fork()
        if helper == 0:
            time.sleep(60)
            os._exit(0)
        os.write(write_fd, f"{helper}\n".encode())
        time.sleep(60)
        lock.release()

    return _fork(work)


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_live_run_holding_the_experiment_refuses_others_and_its_death_frees_it(tmp_path):
    # Issue 40: a second run resumed the first's folder; an overwrite deleted its checkpoints.
    exp, _ = prepare_experiment(_cfg(tmp_path))
    ckpt = _fake_checkpoint(exp.path)
    holder, pipe = _hold_with_a_forked_helper(tmp_path)
    helper = None
    try:
        with os.fdopen(pipe) as lines:
            helper = int(lines.readline())
        before = _tree(exp.path)
        for cfg in (_cfg(tmp_path), _cfg(tmp_path, restart_behavior="overwrite")):
            with pytest.raises(ConfigError) as err:
                prepare_experiment(cfg)
            message = str(err.value)
            assert len(message.splitlines()) == 1
            assert f"is in use by another run (pid {holder};" in message
            assert "--experiment" in message  # what to do
            assert _tree(exp.path) == before and ckpt.exists()  # nothing deleted or written
        # A dead holder's lock does not block, even while a helper it forked is still alive
        # with the lock file open.
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
        holder = None
        assert _is_alive(helper)
        _, resume = prepare_experiment(_cfg(tmp_path))
        assert resume is True
    finally:
        for pid in (holder, helper):
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        if holder is not None:
            os.waitpid(holder, 0)


def test_in_one_process_the_holder_alone_may_prepare_until_it_releases(tmp_path):
    cfg = _cfg(tmp_path)
    lock = lock_experiment(cfg)
    with pytest.raises(ConfigError, match=f"in use by this process \\(pid {os.getpid()};"):
        prepare_experiment(cfg)  # e.g. a second APPO object on the same experiment
    with pytest.raises(ConfigError, match="in use by this process"):
        lock_experiment(cfg)
    prepare_experiment(cfg, lock)  # the holder itself
    lock.release()
    lock.release()  # twice is fine
    prepare_experiment(cfg)
    # The lock file sits beside the folder while held (overwrite cannot delete it) and is
    # removed on release.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_a_forked_child_exiting_leaves_its_parents_lock_alone(tmp_path):
    cfg = _cfg(tmp_path)
    lock = lock_experiment(cfg)
    # What a forked helper's exit runs: the lock's finalizer (at exit).
    child, pipe = _fork(lambda write_fd: lock.release())
    os.waitpid(child, 0)
    os.close(pipe)

    def probe(write_fd: int) -> None:  # another process trying to take it
        experiment_lock._held.clear()  # the parent's registry, copied by fork
        try:
            experiment_lock.ExperimentLock.acquire(tmp_path, "exp")
            os.write(write_fd, b"acquired")
        except ConfigError as e:
            os.write(write_fd, str(e).encode())

    prober, pipe = _fork(probe)
    with os.fdopen(pipe) as result:
        answer = result.read()
    os.waitpid(prober, 0)
    assert f"in use by another run (pid {os.getpid()};" in answer
    assert lock.path.exists()
    lock.release()


def test_checkpoints_without_config_json_are_refused(tmp_path):
    # Issue 40: this used to restart from zero and interleave a new lineage's checkpoints.
    exp, _ = prepare_experiment(_cfg(tmp_path))
    _fake_checkpoint(exp.path)
    exp.config_path.unlink()
    before = _tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        prepare_experiment(_cfg(tmp_path))
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert f"experiment {exp.path} has checkpoints but no config.json" in message
    assert "put back its config.json to resume it" in message
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "content, problem",
    [
        (b'{"env": "CartPole-v1", ', "is not valid JSON"),
        (b"\xff\xfe\x00garbage", "is not valid JSON"),
        (b"[1, 2]", "holds a JSON list, not a config"),
    ],
)
def test_an_unreadable_config_json_is_refused(tmp_path, content, problem):
    exp, _ = prepare_experiment(_cfg(tmp_path))
    _fake_checkpoint(exp.path)
    exp.config_path.write_bytes(content)
    before = _tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        prepare_experiment(_cfg(tmp_path))
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert f"experiment {exp.path}: config.json {problem}" in message
    assert "--restart_behavior overwrite" in message
    assert _tree(tmp_path) == before


def _no_space_left(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_is_a_one_line_error_and_leaves_nothing_half_written(
    tmp_path, monkeypatch, existing
):
    if existing:
        exp, _ = prepare_experiment(_cfg(tmp_path))
        _fake_checkpoint(exp.path)
    before = _tree(tmp_path)
    # .config.json.tmp is written and flushed; making it durable fails, as on a full disk.
    monkeypatch.setattr(experiment_dir.os, "fsync", _no_space_left)
    with pytest.raises(ConfigError) as err:
        prepare_experiment(_cfg(tmp_path, learning_rate=5e-4))
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert f"cannot write the experiment folder {tmp_path / 'exp'}: No space left" in message
    assert _tree(tmp_path) == before  # no .config.json.tmp, no new folder, old config intact


def test_a_read_only_folder_or_train_dir_is_a_one_line_error(tmp_path, monkeypatch):
    exp, _ = prepare_experiment(_cfg(tmp_path))
    before = _tree(tmp_path)

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    # (Tests run as root, which chmod does not stop: the refusal is simulated.)
    monkeypatch.setattr(experiment_dir, "open", read_only, raising=False)
    with pytest.raises(ConfigError) as err:
        prepare_experiment(_cfg(tmp_path))
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "Read-only file system" in message and ".config.json.tmp" in message
    monkeypatch.undo()
    monkeypatch.setattr(experiment_lock.os, "open", read_only)
    with pytest.raises(ConfigError) as err:
        prepare_experiment(_cfg(tmp_path))
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert f"cannot create the experiment's lock file {tmp_path / '.exp.lock'}" in message
    assert "--train_dir" in message
    assert _tree(tmp_path) == before


def test_experiment_names_too_long_for_the_file_system_are_refused(tmp_path):
    # Issue 40: a 256-byte name was a raw OSError traceback. The lock file beside the folder
    # ('.<name>.lock') needs 6 bytes more than the folder.
    for name in ("x" * 256, "é" * 125):  # 256 and 250 bytes
        with pytest.raises(ConfigError) as err:
            make_config(train_dir=str(tmp_path), experiment=name)
        message = str(err.value)
        assert len(message.splitlines()) == 1
        assert "bytes long: at most 249 allowed" in message
    longest = "é" * 124 + "x"  # 249 bytes: its folder and lock file both fit
    exp, _ = prepare_experiment(_cfg(tmp_path, experiment=longest))
    assert exp.config_path.exists()
    with lock_experiment(_cfg(tmp_path, experiment=longest)) as lock:
        assert lock.path.exists()


def test_an_empty_train_dir_is_refused_rather_than_taken_as_the_working_directory():
    with pytest.raises(ConfigError, match=r"train_dir: '' must be a folder path \('\.' for"):
        make_config(train_dir="")
    assert make_config(train_dir=".").train_dir == "."
