"""BenchReport (bench/report.py): the ratios and the stable JSON keys."""

import json

import pytest

from sampleforge.bench.report import BenchReport

STABLE_KEYS = {
    "pure_sim_fps",
    "compute_limit_fps",
    "train_fps",
    "train_over_pure_sim",
    "train_over_compute_limit",
    "mean_policy_lag",
    "num_envs",
    "env",
    "sgd_steps_per_1000_samples",
}


def _report(**overrides) -> BenchReport:
    values = dict(
        env="CartPole-v1",
        num_envs=96,
        cores=2,
        frameskip=1,
        pure_sim_fps=200_000.0,
        compute_limit_fps=100_000.0,
        train_fps=50_000.0,
        mean_policy_lag=7.0,
        sgd_steps_per_1000_samples=15.625,
        inference_batch_size=47.0,
        costs_us={"env_step": 7.0, "inference": 3.0, "learner": 5.0},
        memory_mb=960.0,
        bottleneck="learner-bound",
    )
    values.update(overrides)
    return BenchReport(**values)


def test_json_has_the_documented_keys_and_the_ratios():
    data = json.loads(_report().to_json())
    assert STABLE_KEYS <= set(data)
    assert data["train_over_pure_sim"] == 0.25
    assert data["train_over_compute_limit"] == 0.5


def test_lines_show_both_ratios_the_lag_and_the_bottleneck():
    text = "\n".join(_report().lines())
    assert "25.0%" in text and "50.0%" in text
    assert "lag 7.0" in text and "learner-bound" in text and "10.00 MB per env" in text
    assert "15.62 SGD steps per 1,000 samples" in text


def test_a_zero_denominator_gives_nan_not_an_error():
    report = _report(pure_sim_fps=0.0, compute_limit_fps=0.0)
    assert report.train_over_pure_sim != report.train_over_pure_sim  # nan
    assert report.train_over_compute_limit != report.train_over_compute_limit


def test_ratios_are_withheld_when_another_job_took_cores():
    quiet = _report(load_pure_sim=2.0, load_costs=1.0)
    assert quiet.load_problem is None and quiet.train_over_pure_sim == 0.25
    for loud in (
        _report(load_pure_sim=3.0, load_costs=1.0),
        _report(load_pure_sim=2.0, load_costs=2.0),
    ):
        assert "another job" in loud.load_problem
        data = json.loads(loud.to_json())
        assert data["train_over_pure_sim"] is None and data["train_over_compute_limit"] is None
        text = "\n".join(loud.lines())
        assert "ratios withheld" in text and "%" not in text.split("ratios withheld")[1]


def test_lines_show_the_load_and_the_device():
    text = "\n".join(_report(load_pure_sim=2.0, load_costs=1.0, device="cuda:0").lines())
    assert "2.0 during pure simulation" in text and "1.0 during per-sample costs" in text
    assert "model on cuda:0" in text


def test_a_learner_with_a_replay_gets_its_lines_and_keys():
    report = _report(
        sgd_steps_per_sec=120.0,
        transitions_per_sec=960.0,
        samples_per_insert=7.9,
        replay_bytes_per_transition=56.0,
        replay_size=50_000.0,
        costs_us={"env_step": 7.0, "inference": 3.0, "learner": 5.0, "sgd_step": 40.0},
    )
    text = "\n".join(report.lines())
    assert "960 transitions inserted/s" in text and "120.0 updates/s" in text
    assert "7.9 samples per insert" in text and "56 bytes per transition" in text
    assert "(40 us an update)" in text
    data = json.loads(report.to_json())
    assert data["samples_per_insert"] == 7.9 and data["replay_bytes_per_transition"] == 56.0
    assert data["sgd_steps_per_sec"] == 120.0 and data["transitions_per_sec"] == 960.0


def test_a_learner_without_a_replay_prints_no_replay_line():
    data = json.loads(_report().to_json())
    assert data["samples_per_insert"] is None and data["replay_size"] is None
    assert "replay" not in "\n".join(_report().lines())


def test_a_learner_bound_run_is_also_judged_against_its_learner_alone():
    # A single-threaded learner at 16 ms a sample takes in 62.5 frames/s however many cores.
    report = _report(train_fps=55.0, compute_limit_fps=110.0, learner_limit_fps=62.5)
    data = json.loads(report.to_json())
    assert data["train_over_compute_limit"] == 0.5
    assert data["train_over_learner_limit"] == 0.88
    assert "learner limit" in "\n".join(report.lines()) and "88.0%" in "\n".join(report.lines())


def test_actors_get_their_steps_per_core_of_cpu():
    # 50,000 frames/s at frameskip 4 from actors that used 1.25 cores: 10,000 steps/s a core.
    report = _report(train_fps=50_000.0, frameskip=4, actor_cores=1.25)
    assert report.agent_steps_per_actor_core_sec == 10_000.0
    assert "10,000 agent steps/s per core" in "\n".join(report.lines())
    # With a replay, what went into it counts (the learner's inserted transitions).
    replay = _report(actor_cores=0.5, transitions_per_sec=300.0, samples_per_insert=8.0)
    assert json.loads(replay.to_json())["agent_steps_per_actor_core_sec"] == 600.0


def test_without_the_actors_cpu_no_per_core_figure_is_made_up():
    report = _report(actor_cores=None)
    assert json.loads(report.to_json())["agent_steps_per_actor_core_sec"] is None
    assert "per core" not in "\n".join(report.lines())


def test_the_learners_cpu_is_given_per_update_beside_the_update_alone():
    # Learners that kept 1.5 cores busy for 30 updates a second: 50 ms of CPU an update,
    # against the 35 ms the same update takes alone.
    costs = {"env_step": 7.0, "inference": 3.0, "learner": 5.0, "sgd_step": 35_000.0}
    report = _report(learner_cores=1.5, sgd_steps_per_sec=30.0, costs_us=costs)
    assert json.loads(report.to_json())["learner_cpu_us_per_update"] == pytest.approx(50_000)
    line = next(x for x in report.lines() if "learner CPU" in x)
    assert "50,000 us an update" in line and "1.50 cores" in line
    assert "35,000 us an update alone" in line
    # Without the learners' CPU, or without an update to divide it by, no figure.
    for missing in (_report(learner_cores=None), _report(learner_cores=1.0)):
        assert json.loads(missing.to_json())["learner_cpu_us_per_update"] is None
        assert "learner CPU" not in "\n".join(missing.lines())
