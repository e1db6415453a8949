"""Unit tests for the config schema, validation and CLI flags (sampleforge/config/)."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sampleforge.config import (
    Config,
    ConfigError,
    config_fields,
    config_from_dict,
    config_to_dict,
    make_config,
    validate_config,
)
from sampleforge.config.cli_args import _GROUP_TITLES, parse_config
from sampleforge.config.sources import config_sources


# --- defaults -------------------------------------------------------------------------------
def test_defaults_are_valid():
    cfg = Config()
    validate_config(cfg)  # must not raise
    # The default env (CartPole-v1) is in the vector family: only its settings differ.
    resolved = make_config()
    sources = config_sources(resolved)
    for field in config_fields():
        if getattr(resolved, field.name) != getattr(cfg, field.name):
            assert sources[field.name] == "family", field.name


def test_make_config_with_base_keeps_base_values():
    base = make_config(num_workers=3, rollout=16, batch_size=64)
    cfg = make_config(base, learning_rate="0.01")
    assert cfg.num_workers == 3 and cfg.rollout == 16 and cfg.batch_size == 64
    assert cfg.learning_rate == pytest.approx(0.01)


# --- coercion -------------------------------------------------------------------------------
def test_string_ints_are_coerced():
    cfg = make_config(num_workers="4", train_for_env_steps="1e6", max_policy_lag="1_000")
    assert cfg.num_workers == 4 and type(cfg.num_workers) is int
    assert cfg.train_for_env_steps == 1_000_000 and type(cfg.train_for_env_steps) is int
    assert cfg.max_policy_lag == 1000


def test_integral_float_is_accepted_for_int_but_fraction_is_not():
    assert make_config(num_workers=3.0).num_workers == 3
    with pytest.raises(ConfigError, match="num_workers"):
        make_config(num_workers="2.5")
    with pytest.raises(ConfigError, match="num_workers"):
        make_config(num_workers=2.5)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("true", True),
        ("false", False),
        ("True", True),
        ("FALSE", False),
        ("1", True),
        ("0", False),
        ("yes", True),
        ("off", False),
    ],
)
def test_string_bools_are_coerced(text, expected):
    cfg = make_config(serial_mode=text, tensorboard=text)
    assert cfg.serial_mode is expected and cfg.tensorboard is expected


def test_bad_bool_is_refused():
    with pytest.raises(ConfigError, match="serial_mode") as info:
        make_config(serial_mode="maybe")
    assert "'maybe'" in str(info.value)


def test_bool_is_not_an_int():
    with pytest.raises(ConfigError, match="num_workers"):
        make_config(num_workers=True)


def test_none_string_for_optional_fields():
    cfg = make_config(seed="none", train_for_seconds="None", value_clip="NONE")
    assert cfg.seed is None and cfg.train_for_seconds is None and cfg.value_clip is None
    cfg = make_config(seed="7", train_for_seconds="2.5", value_clip="0.2")
    assert cfg.seed == 7 and cfg.train_for_seconds == 2.5 and cfg.value_clip == 0.2


def test_none_refused_for_non_optional_field():
    with pytest.raises(ConfigError, match="num_workers"):
        make_config(num_workers=None)
    with pytest.raises(ConfigError, match="num_workers"):
        make_config(num_workers="none")


def test_tuple_from_comma_separated_string():
    assert make_config(mlp_hidden_sizes="32,32").mlp_hidden_sizes == (32, 32)
    assert make_config(mlp_hidden_sizes=" 8, 16 ,4").mlp_hidden_sizes == (8, 16, 4)
    assert make_config(mlp_hidden_sizes="128").mlp_hidden_sizes == (128,)
    assert make_config(mlp_hidden_sizes=[5, 6]).mlp_hidden_sizes == (5, 6)


def test_return_std_advantages_need_return_normalisation():
    with pytest.raises(ConfigError, match="advantage_scale 'return_std'.*normalize_returns"):
        make_config(advantage_scale="return_std", normalize_returns=False)
    assert make_config(advantage_scale="return_std", normalize_returns=True).advantage_scale == (
        "return_std"
    )
    with pytest.raises(ConfigError, match="advantage_scale"):
        make_config(advantage_scale="dataset")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"early_num_epochs": 0}, "early_num_epochs: 0 must be >= 1 (or none)"),
        ({"early_env_steps": -1}, "early_env_steps: -1 must be >= 0"),
    ],
)
def test_early_epochs_settings_are_range_checked(overrides, message):
    with pytest.raises(ConfigError) as info:
        make_config(**overrides)
    assert message in str(info.value)
    assert make_config(early_num_epochs="none").early_num_epochs is None


@pytest.mark.parametrize("bad", ["32,x", "", "32,,32", "1.5,2"])
def test_bad_tuple_is_refused(bad):
    with pytest.raises(ConfigError, match="mlp_hidden_sizes"):
        make_config(mlp_hidden_sizes=bad)


def test_tuple_sizes_must_be_positive():
    with pytest.raises(ConfigError, match="mlp_hidden_sizes"):
        make_config(mlp_hidden_sizes="32,0")


def test_string_field_refuses_non_string():
    with pytest.raises(ConfigError, match="env"):
        make_config(env=5)


# --- unknown names --------------------------------------------------------------------------
def test_unknown_key_suggests_closest_name():
    with pytest.raises(ConfigError) as info:
        make_config(num_worker=3)
    message = str(info.value)
    assert "num_worker" in message
    assert "did you mean" in message and "'num_workers'" in message


def test_unknown_keys_and_bad_values_reported_together():
    with pytest.raises(ConfigError) as info:
        make_config(learning_rat=0.1, num_workers="many", device="gpu")
    assert len(info.value.problems) == 3
    message = str(info.value)
    assert "learning_rat" in message and "num_workers" in message and "device" in message


# --- range and cross-field rules ------------------------------------------------------------
def test_several_violations_reported_at_once():
    with pytest.raises(ConfigError) as info:
        make_config(
            num_envs_per_worker=5, worker_num_splits=2, rollout=32, batch_size=100, gamma=1.5
        )
    err = info.value
    message = str(err)
    assert len(err.problems) == 3, err.problems
    assert "3 problems" in message
    assert "num_envs_per_worker (5)" in message and "worker_num_splits (2)" in message
    assert "batch_size (100)" in message and "rollout (32)" in message
    assert "gamma" in message and "1.5" in message
    # one problem per line
    assert all(p in message for p in err.problems)
    assert message.count("\n  - ") == 3


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(gamma=-0.1), "gamma"),
        (dict(gae_lambda=1.01), "gae_lambda"),
        (dict(learning_rate=0), "learning_rate"),
        (dict(num_workers=0), "num_workers"),
        (dict(rollout=-4, batch_size=8), "rollout"),
        (dict(entropy_coeff=-1e-3), "entropy_coeff"),
        (dict(train_for_seconds=0), "train_for_seconds"),
        (dict(reward_clip=-1.0), "reward_clip"),
        (dict(gamma=float("nan")), "gamma"),
        (dict(experiment="a/b"), "experiment"),
        (dict(num_policies=0), "num_policies"),
        (dict(frozen_opponent_prob=1.5), "frozen_opponent_prob"),
        (dict(pbt_mutation_factor=0.9), "pbt_mutation_factor"),
        (dict(ppo_dual_clip=1.0), "ppo_dual_clip"),
        (dict(with_pbt=True), "with_pbt"),
        (dict(policy_mapping="bogus"), "policy_mapping"),
    ],
)
def test_single_range_violation_names_the_field(overrides, field):
    with pytest.raises(ConfigError) as info:
        make_config(**overrides)
    assert len(info.value.problems) == 1, info.value.problems
    assert str(info.value).startswith(f"invalid config: {field}")


def test_unit_interval_bounds_are_inclusive():
    cfg = make_config(gamma=1.0, gae_lambda=0.0)
    assert cfg.gamma == 1.0 and cfg.gae_lambda == 0.0


def test_validate_config_checks_replaced_config():
    cfg = Config().replace(rollout=30)  # 1024 is not a multiple of 30
    with pytest.raises(ConfigError, match="multiple of rollout"):
        validate_config(cfg)


def test_bad_literal_names_field_value_and_allowed_values():
    with pytest.raises(ConfigError) as info:
        make_config(device="gpu")
    message = str(info.value)
    assert "device" in message and "'gpu'" in message
    for allowed in ("auto", "cpu", "cuda"):
        assert allowed in message


def test_bad_literal_suggests_close_value():
    with pytest.raises(ConfigError) as info:
        make_config(rnn="grus")
    assert "did you mean 'gru'" in str(info.value)


def test_literal_values_accepted():
    cfg = make_config(rnn="lstm", algorithm="impala", restart_behavior="overwrite")
    assert (cfg.rnn, cfg.algorithm, cfg.restart_behavior) == ("lstm", "impala", "overwrite")


# --- command line ---------------------------------------------------------------------------
def test_parse_config_coerces_flags():
    cfg = parse_config(
        [
            "--num_workers",
            "3",
            "--train_for_env_steps",
            "1e6",
            "--mlp_hidden_sizes",
            "32,32",
            "--seed",
            "none",
            "--serial_mode",
            "true",
            "--rnn",
            "gru",
        ]
    )
    assert cfg.num_workers == 3
    assert cfg.train_for_env_steps == 1_000_000
    assert cfg.mlp_hidden_sizes == (32, 32)
    assert cfg.seed is None
    assert cfg.serial_mode is True
    assert cfg.rnn == "gru"
    # flags not given keep their defaults
    assert cfg.rollout == Config().rollout


def test_parse_config_without_flags_gives_defaults():
    assert parse_config([]) == make_config()  # the default env's family included


def test_misspelled_flag_exits_2_and_suggests(capsys):
    with pytest.raises(SystemExit) as info:
        parse_config(["--num_worker", "3"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--num_worker" in err
    assert "--num_workers" in err
    assert "did you mean" in err


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["train", "--num_workrs", "2"], "--num_workers"),  # a training flag
        (["enjoy", "--save_vido"], "--save_video"),  # a command's own flag
        (["bench", "--swep"], "--sweep"),
    ],
)
def test_a_misspelled_flag_of_a_command_names_the_closest_flag(capsys, argv, hint):
    from sampleforge.cli.main import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"did you mean '{hint}'" in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--serial_mode"], True),  # a config boolean alone means true
        (["--serial_mode", "true"], True),
        (["--serial_mode", "false"], False),
        (["--serial_mode=no"], False),
    ],
)
def test_config_booleans_take_both_forms(argv, expected):
    assert parse_config(argv).serial_mode is expected


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["enjoy", "--save_video"], True),  # a command's switch takes a value too
        (["enjoy", "--save_video", "true"], True),
        (["enjoy", "--save_video", "false"], False),
        (["enjoy"], False),
    ],
)
def test_command_switches_take_both_forms(argv, expected):
    from sampleforge.cli.main import build_parser

    assert build_parser().parse_args(argv).save_video is expected


def test_a_boolean_flag_with_a_non_boolean_value_is_refused(capsys):
    from sampleforge.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--json", "maybe"])
    assert "'maybe' is not a boolean" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="serial_mode: 'maybe' is not a boolean"):
        parse_config(["--serial_mode", "maybe"])


def test_flag_abbreviations_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        parse_config(["--learning", "0.1"])
    assert info.value.code == 2
    assert "--learning" in capsys.readouterr().err


def test_invalid_flag_value_raises_config_error():
    with pytest.raises(ConfigError, match="num_workers"):
        parse_config(["--num_workers", "0"])


# --- schema metadata ------------------------------------------------------------------------
def test_every_field_has_help_and_group():
    fields = config_fields()
    assert len(fields) > 30
    for f in fields:
        assert isinstance(f.metadata.get("help"), str) and f.metadata["help"].strip(), f.name
        assert f.metadata.get("group") in _GROUP_TITLES, f.name


def test_every_field_has_a_valid_default_of_its_type():
    hints = typing.get_type_hints(Config)
    cfg = Config()
    for f in config_fields():
        value = getattr(cfg, f.name)
        # coercing a default must give back the default unchanged (a flag wins over the family)
        assert getattr(make_config(**{f.name: value}), f.name) == value, f.name
        assert f.name in hints


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().num_workers = 3  # type: ignore[misc]


# --- serialisation --------------------------------------------------------------------------
def test_config_dict_roundtrip_defaults():
    cfg = Config()
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_config_dict_roundtrip_through_json():
    cfg = make_config(
        env="Acrobot-v1",
        experiment="exp1",
        seed=123,
        mlp_hidden_sizes="16,8,4",
        rnn="lstm",
        rnn_size=32,
        train_for_seconds=12.5,
        value_clip=0.2,
        stop_at_mean_return=float("inf"),
        device="cpu",
        serial_mode=True,
        rollout=8,
        batch_size=64,
        learning_rate=3e-4,
    )
    data = json.loads(json.dumps(config_to_dict(cfg)))
    restored = config_from_dict(data)
    assert restored == cfg
    assert restored.mlp_hidden_sizes == (16, 8, 4)


def test_config_to_dict_is_json_ready_and_complete():
    data = config_to_dict(Config())
    assert set(data) == {f.name for f in config_fields()}
    assert isinstance(data["mlp_hidden_sizes"], list)
    json.dumps(data)


def test_config_from_dict_refuses_unknown_keys():
    data = config_to_dict(Config())
    data["old_setting"] = 1
    with pytest.raises(ConfigError, match="old_setting"):
        config_from_dict(data)


# --- property: make_config never raises anything but ConfigError ----------------------------
_ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "none",
            "true",
            "false",
            "1e6",
            "1e400",
            "-3",
            "0",
            "0.5",
            "32,32",
            "nan",
            "inf",
            "-inf",
            "gru",
            "cpu",
            "auto",
            "1_000",
            "",
            ",",
            "2.5",
        ]
    ),
    st.lists(st.integers(min_value=-5, max_value=300), max_size=3),
)
_FIELDS = st.sampled_from(
    [
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "rollout",
        "batch_size",
        "gamma",
        "learning_rate",
        "seed",
        "train_for_seconds",
        "serial_mode",
        "device",
        "rnn",
        "mlp_hidden_sizes",
        "env",
        "experiment",
        "num_workerz",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_FIELDS, _ANY_VALUE, max_size=6))
def test_make_config_returns_config_or_raises_config_error(overrides):
    try:
        cfg = make_config(**overrides)
    except ConfigError as err:
        assert err.problems and all(isinstance(p, str) and p for p in err.problems)
        return
    assert isinstance(cfg, Config)
    validate_config(cfg)  # whatever make_config returns is valid
    # and it survives a dict roundtrip
    assert config_from_dict(config_to_dict(cfg)) == cfg


# --- known bugs -----------------------------------------------------------------------------
def test_huge_int_for_float_field_raises_config_error():
    with pytest.raises(ConfigError, match="learning_rate"):
        make_config(learning_rate=10**400)


def test_large_integer_string_is_exact():
    big = 2**53 + 1  # beyond float64's exact integers (and beyond the seeds' range)
    assert make_config(train_for_env_steps=big).train_for_env_steps == big
    assert make_config(train_for_env_steps=str(big)).train_for_env_steps == big


def test_num_workers_auto_is_one_per_core():
    import os

    cores = len(os.sched_getaffinity(0))
    assert make_config(num_workers="auto").num_workers == cores
    assert parse_config(["--num_workers", "auto"]).num_workers == cores


@pytest.mark.parametrize(
    "command, own_flag", [("enjoy", "--save_video"), ("eval", "--json"), ("export", "--checkpoint")]
)
def test_policy_commands_show_their_own_flags_before_the_training_settings(
    capsys, command, own_flag
):
    from sampleforge.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    help_text = capsys.readouterr().out
    body = help_text[help_text.index("\noptions:") :]  # past the usage line, which lists all
    heading = body.index("training settings: experiment:")
    assert "Read from the experiment's config.json" in body
    assert body.index(own_flag) < heading < body.index("--learning_rate")
    assert "\nlearner and optimizer:" not in body  # every training group sits under the heading
    assert "training settings: learner and optimizer:" in body


def test_a_replay_batch_need_not_be_a_multiple_of_the_rollout():
    """Value-based batches are transitions drawn from a replay, not whole trajectories."""
    cfg = make_config(algorithm="dqn", batch_size=32, rollout=20)
    assert (cfg.batch_size, cfg.rollout) == (32, 20)
    with pytest.raises(ConfigError, match="multiple of rollout"):
        make_config(algorithm="pqn", batch_size=32, rollout=20)


@pytest.mark.parametrize("bad", [[], {}, 3])
def test_an_algorithm_that_is_not_a_name_is_one_config_error(bad):
    """The settings layer picks the algorithm's family defaults before validation runs: a value
    that is not a name must reach validation's one-line error, not fail as a lookup."""
    with pytest.raises(ConfigError, match=r"algorithm: .* is not one of appo, impala, a3c, dqn"):
        make_config(algorithm=bad)


@pytest.mark.parametrize("problems", [["lr: bad"], ["lr: bad", "gamma: worse"]])
def test_a_config_error_survives_pickling_with_its_problems(problems):
    # A Ray trial's error reaches the driver pickled.
    import pickle

    from sampleforge.config import ConfigError

    error = pickle.loads(pickle.dumps(ConfigError(problems)))
    assert error.problems == problems
    assert str(error) == str(ConfigError(problems))
