"""Property: any config either trains or is refused with the project's ConfigError.

Never a TypeError, KeyError or AttributeError from inside a component. Values are drawn from
plausible ranges and sometimes from wrong types or out-of-range values; seeds from the whole
range the generators take and beyond it, and any float setting sometimes NaN, infinite or
beyond float32, which must be refused.
"""

import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sampleforge.components.runner import Runner
from sampleforge.config import ConfigError, make_config
from sampleforge.config.ranges import INFINITY_ALLOWED, float_fields

VALID = {
    "num_envs_per_worker": st.integers(1, 6),
    "worker_num_splits": st.integers(1, 3),
    "rollout": st.integers(1, 12),
    "batch_size": st.sampled_from([4, 8, 12, 16, 24, 32, 64]),
    "num_batches_per_epoch": st.integers(1, 3),
    "num_epochs": st.integers(1, 2),
    "rnn": st.sampled_from(["none", "gru", "lstm"]),
    "rnn_size": st.integers(1, 8),
    "shared_weights": st.booleans(),
    "encoder": st.sampled_from(["auto", "mlp", "conv_simple", "conv_nature"]),
    "mlp_hidden_sizes": st.sampled_from(["8", "4,4", (16,)]),
    "activation": st.sampled_from(["elu", "relu", "tanh"]),
    "normalize_obs": st.booleans(),
    "algorithm": st.sampled_from(["appo", "impala", "a3c", "dqn", "rainbow", "iqn", "pqn"]),
    "with_vtrace": st.booleans(),
    "value_clip": st.sampled_from([None, 0.2]),
    "ppo_dual_clip": st.sampled_from([None, 3.0]),
    "reward_clip": st.sampled_from([None, 1.0]),
    "lr_schedule": st.sampled_from(["constant", "linear"]),
    "max_policy_lag": st.integers(1, 5),
    "gamma": st.floats(0.0, 1.0),
    "learning_rate": st.floats(1e-5, 1e-2),
}
WRONG = st.sampled_from([-1, 0, "x", None, 2.5, [], {}])
# Seeds the generators take whatever the settings drawn (the largest leaves room for the
# seeds derived per policy and worker), and seeds no generator takes.
GOOD_SEEDS = st.one_of(st.integers(0, 2**32 - 1 - 1000), st.just(2**32 - 1 - 1000))
BAD_SEEDS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32), st.just(2**64))
NON_FINITE = st.sampled_from(["nan", "inf", "-inf", 1e300, -1e300, math.nan, math.inf])
# The float settings the test sets itself (stop_at_mean_return inf: train for the whole budget).
SET_BY_THE_TEST = {"stop_at_mean_return", "report_every_sec", "save_every_sec"}
FLOATS = sorted(set(float_fields()) - INFINITY_ALLOWED - SET_BY_THE_TEST)


@st.composite
def configs(draw) -> tuple[dict, bool]:
    """Mostly plausible settings; sometimes one or two of them wrong in type or range; a
    seed; sometimes a float setting that is not finite. Also returns whether the config
    must be refused."""
    chosen = draw(st.lists(st.sampled_from(sorted(VALID)), unique=True, max_size=10))
    overrides = {name: draw(VALID[name]) for name in chosen}
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), unique=True, max_size=2)):
        if draw(st.booleans()):
            overrides[name] = draw(WRONG)
    # Rare enough that most drawn configs still get to train.
    must_refuse = False
    if draw(st.booleans()):
        bad_seed = draw(st.integers(0, 3)) == 3
        overrides["seed"] = draw(BAD_SEEDS if bad_seed else GOOD_SEEDS)
        must_refuse = bad_seed
    if draw(st.integers(0, 7)) == 7:
        overrides[draw(st.sampled_from(FLOATS))] = draw(NON_FINITE)
        must_refuse = True
    return overrides, must_refuse


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=configs())
def test_config_trains_or_is_refused_with_config_error(tmp_path_factory, drawn):
    overrides, must_refuse = drawn
    try:
        cfg = make_config(
            env="CartPole-v1",
            serial_mode=True,
            device="cpu",
            train_dir=str(tmp_path_factory.mktemp("run")),
            num_workers=1,
            train_for_env_steps=600,
            stop_at_mean_return=math.inf,
            report_every_sec=60,
            save_every_sec=600,
            **overrides,
        )
        runner = Runner(cfg)
    except ConfigError:
        event("refused")
        return
    assert not must_refuse, f"accepted a seed or float no generator or tensor can take: {overrides}"
    event("trained")
    with runner:
        summary = runner.train()
    assert summary.env_steps >= 600
