"""The bottleneck label (telemetry/bottleneck.py) names the component that holds a run back."""

import pytest

from sampleforge.telemetry.bottleneck import LEAD_AT_CAP, bottleneck

# The perf/ seconds of two runs (8 rollout workers, 35 s): a CPU learner that never waits,
# and the H200 bench of atari_breakout (docs/benchmarks.md), whose learner trained 6.5 s of 35
# (its waits were not measured then: the rest of the 35 s, less start-up, is assumed here).
LEARNER_BOUND = {
    "perf/rollout_env_step_sec": 50.0,
    "perf/rollout_wait_sec": 230.0,
    "perf/inference_forward_sec": 9.0,
    "perf/learner_train_sec": 33.0,
    "perf/learner_wait_sec": 1.0,
    LEAD_AT_CAP: 1.0,
}
GATE_BOUND = {
    "perf/rollout_env_step_sec": 53.7,
    "perf/rollout_wait_sec": 238.0,
    "perf/inference_forward_sec": 11.9,
    "perf/learner_train_sec": 6.5,
    "perf/learner_wait_sec": 27.0,
    LEAD_AT_CAP: 1.0,
}


def test_workers_that_rarely_wait_are_the_limit():
    assert bottleneck({"perf/rollout_env_step_sec": 80.0, "perf/rollout_wait_sec": 20.0}) == (
        "sampler-bound"
    )


def test_a_busy_learner_with_its_lead_at_the_cap_is_still_the_limit():
    assert bottleneck(LEARNER_BOUND) == "learner-bound"


def test_a_waiting_learner_with_its_lead_at_the_cap_means_the_lag_bound_holds_sampling():
    assert bottleneck(GATE_BOUND) == "lag-bound"


def test_a_waiting_learner_whose_lead_can_still_grow_leaves_inference_as_the_limit():
    assert bottleneck({**GATE_BOUND, LEAD_AT_CAP: 0.0}) == "inference-bound"


@pytest.mark.parametrize("missing", ["perf/learner_wait_sec", LEAD_AT_CAP])
def test_runs_without_the_gate_s_figures_are_judged_as_before(missing):
    scalars = {k: v for k, v in GATE_BOUND.items() if k != missing}
    assert bottleneck(scalars) == "inference-bound"


def test_no_timings_yet_is_unknown():
    assert bottleneck({}) == "unknown"
