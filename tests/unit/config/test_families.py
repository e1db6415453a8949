"""Env families (config/families.py) and where each setting comes from (config/sources.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sampleforge.checkpoint.experiment_dir import prepare_experiment
from sampleforge.cli.main import main
from sampleforge.config import Config, config_from_dict, make_config
from sampleforge.config.cli_args import parse_config
from sampleforge.config.families import FAMILY_NAMES, env_family, family_settings
from sampleforge.config.sources import SOURCE_NAMES, config_sources
from sampleforge.envs.doom.scenarios import DOOM_SCENARIOS, GAMMA_AT_FRAMESKIP
from sampleforge.envs.registry import resolve_env


@pytest.mark.parametrize(
    "env, family",
    [
        ("atari_breakout", "atari"),
        ("atari_pong", "atari"),
        ("doom_defend_the_center", "doom"),
        ("doom_health_gathering", "doom"),
        ("HalfCheetah-v5", "continuous"),
        ("Hopper-v5", "continuous"),
        ("Pendulum-v1", "continuous"),
        ("MountainCarContinuous-v0", "continuous"),
        ("CartPole-v1", "vector"),
        ("Acrobot-v1", "vector"),
        ("MountainCar-v0", "vector"),
        ("mypkg.envs:Maze-v0", None),
        ("envpool:Pong-v5", None),
        ("NoSuchEnv-v0", None),
    ],
)
def test_the_env_name_decides_the_family(env, family):
    assert env_family(env) == family


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_family_gives_a_valid_config_with_its_values(family):
    env = {
        "atari": "atari_breakout",
        "doom": "doom_basic",
        "continuous": "Hopper-v5",
        "vector": "Acrobot-v1",
    }[family]
    cfg = make_config(env=env)
    sources = config_sources(cfg)
    for key, value in family_settings(family, env).items():
        if value != "auto":  # resolved for this machine
            assert getattr(cfg, key) == value, key
        assert sources[key] == "family", key
    assert cfg.normalize_returns and cfg.reward_scale == 1.0


@pytest.mark.parametrize(
    "env, frameskip, gamma",
    [
        ("doom_basic", 4, 0.99),
        ("doom_health_gathering", 4, 0.99),
        ("doom_deathmatch_bots", 2, 0.995),
        ("doom_duel", 2, 0.995),
    ],
)
def test_a_doom_env_gets_the_discount_that_the_paper_pairs_with_its_frameskip(
    env, frameskip, gamma
):
    # Table A.5: frameskip 4 with 0.99, frameskip 2 with 0.995 (the same horizon in game time).
    assert resolve_env(env).frameskip == frameskip
    cfg = make_config(env=env)
    assert (cfg.gamma, config_sources(cfg)["gamma"]) == (gamma, "family")
    # A preset's doom settings leave it; a flag still wins.
    assert make_config(env=env, preset="doom").gamma == gamma
    assert make_config(env=env, gamma=0.9).gamma == 0.9


def test_every_doom_scenario_has_a_discount_for_its_frameskip():
    for name, scenario in DOOM_SCENARIOS.items():
        assert scenario.frameskip in GAMMA_AT_FRAMESKIP, name


def test_atari_without_a_preset_gets_the_atari_ppo_recipe_not_cartpoles():
    cfg = parse_config(["--env", "atari_breakout"])
    assert (cfg.rollout, cfg.batch_size, cfg.num_batches_per_epoch, cfg.num_epochs) == (
        128,
        256,
        4,
        1,
    )
    assert (cfg.learning_rate, cfg.lr_schedule, cfg.entropy_coeff, cfg.ppo_clip_ratio) == (
        5e-4,
        "linear",
        0.01,
        0.1,
    )
    assert cfg.activation == "relu" and not cfg.with_vtrace
    assert cfg.learning_rate != Config().learning_rate  # not CartPole's
    # Two epochs over the first 1M frames: Breakout's 10 by 0.5M frames.
    assert (cfg.early_num_epochs, cfg.early_env_steps) == (2, 1_000_000)


@pytest.mark.parametrize("algorithm", ["sac", "td3", "ddpg", "crossq"])
def test_a_user_env_of_no_family_gets_the_continuous_recipe(algorithm):
    # Every env a continuous-control algorithm takes has Box actions; the user's own once got
    # the generic defaults (a small replay and network, learning from the first steps).
    own = make_config(algorithm=algorithm, env="my_package.envs:make_env")
    mujoco = make_config(algorithm=algorithm, env="HalfCheetah-v5")
    assert env_family("my_package.envs:make_env") is None
    assert dataclasses.asdict(own) == {**dataclasses.asdict(mujoco), "env": own.env}
    assert config_sources(own)["replay_size"] == "family"


def test_flags_win_over_the_preset_which_wins_over_the_family():
    cfg = make_config(env="atari_breakout", preset="doom", learning_rate=1e-3)
    sources = config_sources(cfg)
    assert (cfg.learning_rate, sources["learning_rate"]) == (1e-3, "flag")
    assert (cfg.activation, sources["activation"]) == ("elu", "preset")
    assert (cfg.rollout, sources["rollout"]) == (128, "family")  # the doom preset leaves it
    assert (cfg.gamma, sources["gamma"]) == (0.99, "family")
    assert (cfg.rnn, sources["rnn"]) == ("gru", "preset")
    assert (cfg.shared_weights, sources["shared_weights"]) == (True, "default")
    assert sources["env"] == "flag" and set(sources.values()) <= set(SOURCE_NAMES)


def test_a_flag_equal_to_the_default_still_counts_as_a_flag():
    cfg = make_config(env="atari_breakout", rollout=32)
    assert cfg.rollout == 32 and config_sources(cfg)["rollout"] == "flag"


def test_changing_the_env_of_a_config_swaps_the_family_but_keeps_flags():
    atari = make_config(env="atari_breakout", learning_rate=1e-3)
    vector = make_config(atari, env="Acrobot-v1")
    sources = config_sources(vector)
    assert (vector.learning_rate, sources["learning_rate"]) == (1e-3, "flag")
    assert (vector.rollout, sources["rollout"]) == (Config().rollout, "default")
    assert (vector.activation, sources["activation"]) == (Config().activation, "default")
    assert (vector.ppo_clip_ratio, sources["ppo_clip_ratio"]) == (0.2, "family")  # atari: 0.1 0.1
    # The deathmatch's discount goes with its frameskip, not with the next env.
    deathmatch = make_config(env="doom_deathmatch_bots")
    assert make_config(deathmatch, env="doom_basic").gamma == 0.99
    # A config derived without a new env keeps its sources.
    assert config_sources(make_config(atari, seed=3))["rollout"] == "family"


def test_config_json_records_every_value_and_its_source(tmp_path):
    cfg = make_config(env="atari_breakout", train_dir=str(tmp_path), num_epochs=2)
    exp, _ = prepare_experiment(cfg)
    saved = json.loads(exp.config_path.read_text())
    assert saved["num_epochs"] == 2 and saved["sources"]["num_epochs"] == "flag"
    assert saved["rollout"] == 128 and saved["sources"]["rollout"] == "family"
    assert saved["sources"]["rnn"] == "default"
    assert set(saved["sources"]) == {k for k in saved if k != "sources"}
    restored = config_from_dict(saved)
    assert restored == cfg and dict(config_sources(restored)) == saved["sources"]


def test_print_config_prints_values_and_sources_and_trains_nothing(tmp_path, capsys):
    code = main(
        [
            "train",
            "--env",
            "atari_breakout",
            "--num_epochs",
            "2",
            "--train_dir",
            str(tmp_path),
            "--print_config",
        ]
    )
    assert code == 0
    lines = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()}
    assert lines["num_epochs"] == ["2", "flag"]
    assert lines["rollout"] == ["128", "family"]
    assert lines["rnn"] == ["none", "default"]
    assert lines["env"] == ["atari_breakout", "flag"]
    assert len(lines) == len(Config.__dataclass_fields__)
    assert not any(tmp_path.iterdir())  # no experiment folder was made


@pytest.mark.parametrize("env", ["CartPole-v1", "atari_pong"])
def test_pqn_keeps_the_steps_of_its_one_dataset_lead_with_the_papers_minibatches(env):
    # The paper's Atari recipe: 2 epochs of 32 minibatches, 64 SGD steps a dataset; PQN samples
    # a dataset ahead, so a dataset's oldest steps are up to about two datasets old.
    cfg = make_config(env=env, algorithm="pqn", num_batches_per_epoch=32, num_epochs=2)
    assert cfg.max_policy_lag >= 2 * 64
    assert config_sources(cfg)["max_policy_lag"] == "family"


def test_pqn_on_atari_trains_on_the_papers_datasets():
    # purejaxql's pqn_atari.yaml: a dataset is one sweep of 128 envs x 32 steps, trained in 16
    # SGD steps per 1,024 samples at a constant rate.
    cfg = make_config(env="atari_breakout", algorithm="pqn")
    assert cfg.dataset_size == cfg.num_envs_per_worker * cfg.rollout == 128 * 32
    assert cfg.num_epochs * cfg.num_batches_per_epoch * 1024 / cfg.dataset_size == 16
    assert (cfg.lr_schedule, config_sources(cfg)["lr_schedule"]) == ("constant", "family")
