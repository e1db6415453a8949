"""Searches on a local Ray (2 CPUs): PBT copies a member's whole learner state and mutates by
the configured factors, a killed trial resumes from its checkpoint, a grid gives one result per
point. Tiny runs: CartPole in serial mode (one process per trial), a few thousand env steps."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.tune", reason="the ray extra is not installed")

from ray import tune  # noqa: E402

from sampleforge.tune.search import Range, SearchSpec, run_search  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

# 8 envs x rollout 32: a train call of STEPS env steps is 4 datasets.
TRIAL = {
    "algorithm": "appo",
    "env": "CartPole-v1",
    "serial_mode": True,
    "num_workers": 1,
    "num_envs_per_worker": 8,
}
STEPS = 2048  # env steps per Tune iteration (a whole number of serial-mode datasets)


def _progress(output: Path) -> dict[str, list[dict[str, str]]]:
    """Every trial's reported results in order: {trial_id: rows of its progress.csv}."""
    runs: dict[str, list[dict[str, str]]] = {}
    for path in sorted((output / output.name).glob("*/progress.csv")):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        runs[rows[0]["trial_id"]] = rows
    return runs


# --- PBT ------------------------------------------------------------------------------------
LR = Range(1e-5, 1e-2)
FACTORS = (1.5, 0.5)


@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    output = tmp_path_factory.mktemp("pbt")
    spec = SearchSpec(
        search="pbt",
        base=TRIAL,
        output_dir=output,
        trial_env_steps=4 * STEPS,
        # Two members start where CartPole learns in a few thousand steps, two where it
        # does not: from the third round on, those two rank in the bottom half, and copy.
        params={"learning_rate": [1e-5, 3e-3]},
        mutations={"learning_rate": LR},
        num_samples=4,
        quantile_fraction=0.5,
        env_steps_per_iteration=STEPS,
        perturbation_interval=STEPS,
        perturbation_factors=FACTORS,
        resample_probability=0.0,  # every mutation is a factor (or a clamp to the range)
        seed=3,
        verbose=0,
    )
    return output, run_search(spec)


def test_pbt_exploit_copies_the_weights_and_the_optimizer_state(pbt_run):
    output, rows = pbt_run
    assert len(rows) == 4 and {row["status"] for row in rows} == {"done"}
    runs = _progress(output)
    copies = 0
    for trial, results in runs.items():
        for result in results:
            donor = result["restored_from"]
            if not donor or donor == trial:
                continue
            copies += 1
            # What the donor's run had at the end of one of its iterations (its own report)...
            donor_states = {
                (r["weights_sha256"], r["optimizer_sha256"]): int(r["optimizer_steps"])
                for r in runs[donor]
            }
            restored = (result["restored_weights_sha256"], result["restored_optimizer_sha256"])
            # ...is what this member's restarted learner published and resumed from,
            assert restored in donor_states, (trial, donor)
            # and its optimizer went on counting from there (a fresh one starts at 0).
            assert int(result["optimizer_steps"]) > donor_states[restored]
            assert int(result["env_steps"]) > int(result["restored_env_steps"]) > 0
    assert copies >= 1, "no exploit happened"


def test_pbt_mutations_follow_the_configured_factors(pbt_run):
    output, _ = pbt_run
    lines = (output / output.name / "pbt_global.txt").read_text().splitlines()
    assert lines, "no exploit happened"
    for line in lines:
        _, _, _, _, donor_config, new_config = json.loads(line)
        old, new = donor_config["learning_rate"], new_config["learning_rate"]
        unclamped = [old * factor for factor in FACTORS]
        assert any(new == pytest.approx(min(max(value, LR.low), LR.high)) for value in unclamped), (
            old,
            new,
        )
        assert LR.low <= new <= LR.high


# --- a killed trial -------------------------------------------------------------------------
class _KillOnce(tune.Callback):
    """SIGKILLs a trial's process once, as a preempted node would, after its 2nd result."""

    def __init__(self) -> None:
        self.killed: int | None = None

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        if self.killed is None and result["training_iteration"] == 2:
            self.killed = result["pid"]
            os.kill(result["pid"], signal.SIGKILL)


def test_a_killed_trial_resumes_from_its_checkpoint(tmp_path):
    kill = _KillOnce()
    spec = SearchSpec(
        search="grid",
        base=TRIAL,
        output_dir=tmp_path,
        trial_env_steps=3 * STEPS,
        env_steps_per_iteration=STEPS,
        max_failures=1,
        verbose=0,
        callbacks=[kill],
    )
    rows = run_search(spec)
    assert kill.killed is not None
    assert [row["status"] for row in rows] == ["done"]
    [(trial, results)] = _progress(tmp_path).items()
    resumed = [r for r in results if r["restored_from"] == trial]
    assert resumed, "the trial did not restore a checkpoint"
    first = resumed[0]
    # It went on from a checkpointed state, not from zero, and finished its steps.
    assert int(first["restored_env_steps"]) >= STEPS
    assert int(first["env_steps"]) > int(first["restored_env_steps"])
    assert int(results[-1]["env_steps"]) >= 3 * STEPS
    assert int(first["pid"]) != kill.killed


# --- grid -----------------------------------------------------------------------------------
def test_a_grid_of_four_points_gives_four_results_with_their_configs(tmp_path):
    spec = SearchSpec(
        search="grid",
        base=TRIAL,
        output_dir=tmp_path,
        trial_env_steps=STEPS,
        params={"learning_rate": [1e-4, 3e-4], "entropy_coeff": [0.0, 0.01]},
        verbose=0,
    )
    rows = run_search(spec)
    points = {(row["learning_rate"], row["entropy_coeff"]) for row in rows}
    assert points == {(1e-4, 0.0), (1e-4, 0.01), (3e-4, 0.0), (3e-4, 0.01)}
    assert all(row["status"] == "done" and row["env_steps"] >= STEPS for row in rows)
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4
    # Each result's run used its point: the run's own config.json says so.
    for row in rows:
        saved = json.loads((Path(row["experiment_dir"]) / "config.json").read_text())
        assert (saved["learning_rate"], saved["entropy_coeff"]) == (
            row["learning_rate"],
            row["entropy_coeff"],
        )
