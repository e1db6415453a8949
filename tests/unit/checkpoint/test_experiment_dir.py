"""Unit tests for the experiment folder: creation, resume rules, overwrite (experiment.py)."""

from __future__ import annotations

import json

import pytest

from sampleforge.checkpoint.experiment_dir import (
    FROZEN_ON_RESUME,
    MARKER_FILENAME,
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
    with pytest.raises(ConfigError, match="symbolic link"):
        prepare_experiment(_cfg(train_dir, experiment="link", restart_behavior="overwrite"))
    assert _tree(tmp_path) == before
