"""Every float setting is finite and in range, and every seed derived from `seed` fits the
generators (sampleforge/config/ranges.py): refused with one line naming the field, the value
and what is allowed, before anything starts."""

from __future__ import annotations

import math

import pytest

from sampleforge.config import ConfigError, make_config
from sampleforge.config.cli_args import parse_config
from sampleforge.config.ranges import INFINITY_ALLOWED, float_fields, largest_seed_offset

FLOATS = float_fields()


def _refusal(**overrides) -> str:
    with pytest.raises(ConfigError) as err:
        make_config(**overrides)
    assert len(err.value.problems) == 1, err.value.problems
    assert "\n" not in str(err.value)
    return err.value.problems[0]


def test_the_float_settings_are_found_in_the_schema():
    assert {"learning_rate", "adam_eps", "stop_at_mean_return", "value_clip"} <= set(FLOATS)
    assert "seed" not in FLOATS and "num_workers" not in FLOATS


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e300", "-1e39"])
def test_every_float_setting_is_finite_and_within_float32(name, bad):
    if name in INFINITY_ALLOWED and bad != "nan":
        if bad in ("inf", "-inf"):
            assert getattr(make_config(**{name: bad}), name) == float(bad)
        return
    problem = _refusal(**{name: bad})
    assert problem.startswith(f"{name}: {float(bad):g} is not allowed (allowed: ")


@pytest.mark.parametrize(
    "name, bad, allowed",
    [
        ("learning_rate", "inf", "a finite number in (0, 1]"),
        ("adam_eps", "inf", "a finite number in (0, 1]"),
        ("gamma", "nan", "a finite number in [0, 1]"),
        ("value_clip", "inf", "a finite number > 0, or none"),
        ("stop_at_mean_return", "nan", "a number, inf or -inf, or none"),
    ],
)
def test_the_message_says_what_is_allowed(name, bad, allowed):
    assert _refusal(**{name: bad}) == f"{name}: {bad} is not allowed (allowed: {allowed})"


@pytest.mark.parametrize(
    "name, too_large, largest",
    [
        ("learning_rate", 1.5, 1.0),
        ("adam_eps", 2.0, 1.0),
        ("value_loss_coeff", 1e4, 1e3),
        ("entropy_coeff", 1e4, 1e3),
        ("reward_scale", 1e7, 1e6),
    ],
)
def test_values_that_would_overflow_or_stall_learning_have_an_upper_bound(name, too_large, largest):
    assert getattr(make_config(**{name: largest}), name) == largest
    problem = _refusal(**{name: too_large})
    assert problem.startswith(f"{name}: {too_large:g} must be in ")
    assert f", {largest:g}] (" in problem  # the bound, then why it is there


@pytest.mark.parametrize("name", ["adam_beta1", "adam_beta2"])
def test_adam_betas_must_be_below_one(name):
    assert _refusal(**{name: 1.0}) == f"{name}: 1 must be in [0, 1)"
    assert getattr(make_config(**{name: 0.0}), name) == 0.0


def test_the_range_checks_still_catch_ordinary_out_of_range_values():
    assert _refusal(train_for_seconds=-1) == "train_for_seconds: -1 must be > 0 (or none)"
    assert _refusal(ppo_dual_clip=0.5) == "ppo_dual_clip: 0.5 must be > 1 (or none)"
    assert _refusal(max_grad_norm=-1) == "max_grad_norm: -1 must be >= 0"
    assert make_config(stop_at_mean_return=-math.inf).stop_at_mean_return == -math.inf


def test_flags_are_refused_the_same_way():
    with pytest.raises(ConfigError, match=r"^invalid config: learning_rate: inf is not allowed"):
        parse_config(["--learning_rate", "inf"])
    with pytest.raises(ConfigError, match=r"^invalid config: adam_eps: inf is not allowed"):
        parse_config(["--adam_eps", "inf"])


# --- seeds ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 2**32, 2**64, 10**30])
def test_a_seed_outside_the_generators_range_is_refused(seed):
    problem = _refusal(seed=seed)
    assert problem.startswith(f"seed: {seed} must be in [0, {2**32 - 1 - 1000}] (or none")


@pytest.mark.parametrize(
    "population",
    [
        {},
        {"num_inference_workers": 3},
        {"num_policies": 4},
        {"num_policies": 2, "num_frozen_opponents": 3, "num_inference_workers": 2},
    ],
)
def test_the_largest_seed_is_the_one_whose_derived_seeds_all_fit(population):
    cfg = make_config(**population)
    # The seeds the components derive (learner_worker.py, inference_worker.py).
    learners = [7919 * p for p in range(cfg.num_policies)]
    inference = [
        1000 * (p + 1) + i
        for p in range(cfg.num_policies + cfg.num_frozen_opponents)
        for i in range(cfg.num_inference_workers)
    ]
    offset = max(learners + inference)
    assert largest_seed_offset(cfg) == offset
    highest = 2**32 - 1 - offset
    assert make_config(seed=highest, **population).seed == highest
    assert make_config(seed=0, **population).seed == 0
    problem = _refusal(seed=highest + 1, **population)
    assert problem.startswith(f"seed: {highest + 1} must be in [0, {highest}] (or none: random)")
    assert f"add up to {offset} to it" in problem


# --- the algorithms' settings ---------------------------------------------------------------
@pytest.mark.parametrize(
    "name, bad",
    [
        ("gamma", 1.5),
        ("gae_lambda", -0.1),
        ("ppo_clip_ratio", 0.0),
        ("vtrace_rho_bar", 0.0),
        ("vtrace_c_bar", 0.0),
        ("ppo_dual_clip", 1.0),
        ("value_clip", 0.0),
    ],
)
def test_the_config_refuses_what_the_actor_critic_loss_would_refuse(name, bad):
    # Before the learner starts, in one line, not as a ValueError from its first loss.
    from sampleforge.algo.actor_critic_loss import ActorCriticSettings, check_settings

    with pytest.raises(ValueError, match=name):
        check_settings(ActorCriticSettings(**{name: bad}), "appo")
    assert _refusal(**{name: bad}).startswith(f"{name}: {bad:g} must be ")


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("n_step", 0, "n_step: 0 must be in [1, 255]"),
        ("n_step", 256, "n_step: 256 must be in [1, 255]"),
        ("replay_size", 0, "replay_size: 0 must be >= 1"),
        ("learning_starts", 0, "learning_starts: 0 must be >= 1"),
        ("samples_per_insert", 0, "samples_per_insert: 0 must be > 0"),
        ("target_update_period", 0, "target_update_period: 0 must be >= 1"),
        ("target_tau", 0, "target_tau: 0 must be in (0, 1]"),
        ("target_tau", 1.5, "target_tau: 1.5 must be in (0, 1]"),
        ("priority_alpha", -0.5, "priority_alpha: -0.5 must be >= 0"),
        ("priority_beta", 1.5, "priority_beta: 1.5 must be in [0, 1]"),
        ("epsilon_start", 1.5, "epsilon_start: 1.5 must be in [0, 1]"),
        ("epsilon_end", -0.1, "epsilon_end: -0.1 must be in [0, 1]"),
        ("epsilon_ladder_base", 2, "epsilon_ladder_base: 2 must be in [0, 1]"),
        ("exploration_env_steps", 0, "exploration_env_steps: 0 must be >= 1"),
        ("epsilon_ladder_alpha", -1, "epsilon_ladder_alpha: -1 must be >= 0"),
        ("num_atoms", 1, "num_atoms: 1 must be >= 2"),
        ("num_quantiles", 0, "num_quantiles: 0 must be >= 1"),
        ("num_fractions", 1, "num_fractions: 1 must be >= 2"),
        ("fraction_lr", -1e-9, "fraction_lr: -1e-09 must be >= 0"),
        ("munchausen_alpha", 1.5, "munchausen_alpha: 1.5 must be in [0, 1]"),
        ("munchausen_tau", 0, "munchausen_tau: 0 must be > 0"),
        ("munchausen_clip", 0, "munchausen_clip: 0 must be < 0"),
        ("q_lambda", 1.5, "q_lambda: 1.5 must be in [0, 1]"),
    ],
)
def test_value_based_settings_out_of_range_are_refused_in_one_line(name, bad, message):
    assert _refusal(**{name: bad}) == message


@pytest.mark.parametrize(
    "name, edge",
    [
        ("n_step", 1),
        ("n_step", 255),
        ("learning_starts", 1),
        ("target_tau", 1.0),
        ("priority_beta", 1.0),
        ("epsilon_end", 0.0),
        ("num_atoms", 2),
        ("num_fractions", 2),
        ("fraction_lr", 0.0),
        ("q_lambda", 0.0),
        ("munchausen_clip", -1e-6),
    ],
)
def test_value_based_settings_at_their_bounds_are_accepted(name, edge):
    assert getattr(make_config(**{name: edge}), name) == edge


@pytest.mark.parametrize("v_min, v_max", [(10.0, -10.0), (1.0, 1.0)])
def test_the_categorical_support_must_not_be_empty(v_min, v_max):
    problem = _refusal(v_min=v_min, v_max=v_max)
    assert problem.startswith(f"v_min ({v_min:g}) must be below v_max ({v_max:g})")
    assert make_config(v_min=-1.0, v_max=1.0).v_max == 1.0


@pytest.mark.parametrize(
    "name, value, bounds",
    [("learning_rate", 0.5, "[1e-07, 0.1]"), ("entropy_coeff", 2.0, "[0, 1]")],
)
def test_a_pbt_run_must_start_inside_the_bounds_pbt_keeps(name, value, bounds):
    # The setting's own range admits the value; PBT's table refused it with a traceback after
    # config.json was written.
    problem = _refusal(env="CartPole-v1", with_pbt=True, num_policies=2, **{name: value})
    assert problem == (
        f"{name}: {value:g} is outside {bounds}, the bounds PBT keeps it within (with_pbt true)"
    )
    make_config(env="CartPole-v1", num_policies=2, **{name: value})  # fine without PBT
