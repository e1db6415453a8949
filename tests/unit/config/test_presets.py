"""Presets (config/presets.py): their settings apply under the ones given explicitly."""

from __future__ import annotations

import pytest

from sampleforge.config import ConfigError, make_config
from sampleforge.config.cli_args import parse_config
from sampleforge.config.families import family_settings
from sampleforge.config.presets import PRESET_NAMES, preset_settings
from sampleforge.envs.mujoco import mujoco_preset


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_gives_a_valid_config_with_its_values(name):
    cfg = make_config(preset=name)
    for key, value in preset_settings(name).items():
        if value != "auto":  # resolved for this machine
            assert getattr(cfg, key) == value, key


def test_explicit_settings_win_over_the_preset():
    cfg = make_config(env="Hopper-v5", preset="mujoco", learning_rate=1e-4)
    assert cfg.learning_rate == 1e-4
    assert cfg.num_epochs == mujoco_preset()["num_epochs"]
    assert not cfg.with_vtrace


def test_preset_from_the_command_line():
    cfg = parse_config(["--env", "CartPole-v1", "--preset", "atari", "--num_epochs", "2"])
    assert (cfg.batch_size, cfg.rollout, cfg.num_epochs) == (256, 128, 2)


@pytest.mark.parametrize(
    "preset, family", [("atari", "atari"), ("doom", "doom"), ("mujoco", "continuous")]
)
def test_a_family_preset_is_that_familys_settings(preset, family):
    assert preset_settings(preset) == family_settings(family)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(
        ConfigError,
        match="preset: 'mujuco' is not one of mujoco, atari, doom, duel .*did you mean 'mujoco'",
    ):
        make_config(preset="mujuco")


@pytest.mark.parametrize("cores, workers", [(1, 1), (2, 1), (3, 1), (8, 4), (64, 32)])
def test_atari_preset_leaves_half_the_cores_to_the_conv_learner(monkeypatch, cores, workers):
    import sampleforge.config.families as families

    monkeypatch.setattr(families, "available_cores", lambda: cores)
    assert preset_settings("atari")["num_workers"] == workers
    assert make_config(preset="atari", num_workers=3).num_workers == 3  # explicit wins


@pytest.mark.parametrize("algorithm", ["dqn", "rainbow", "pqn"])
def test_a_family_preset_gives_a_value_based_algorithm_its_own_recipe(algorithm):
    """`--preset atari` on a value-based run applies the value-based Atari recipe, not the
    actor-critic one (whose lr and epochs mean nothing to a replay learner)."""
    expected = family_settings("atari", algorithm=algorithm)
    assert expected != family_settings("atari")
    cfg = make_config(env="CartPole-v1", algorithm=algorithm, preset="atari")
    for key, value in expected.items():
        if value != "auto":
            assert getattr(cfg, key) == (tuple(value) if isinstance(value, list) else value), key
