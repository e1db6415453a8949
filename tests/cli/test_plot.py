"""`sampleforge plot` and the learning-curve data behind it: runs grouped by config, mean and
band over seeds, wall time that goes on across resumes."""

import json

import numpy as np
import pytest

from sampleforge.cli.main import main
from sampleforge.telemetry.learning_curves import (
    RETURN,
    first_reach,
    group_runs,
    mean_and_band,
    read_curves,
    read_run,
    write_curves,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _fake_run(folder, seed, returns, algorithm="appo", wall=None):
    folder.mkdir(parents=True)
    config = {
        "env": "CartPole-v1",
        "algorithm": algorithm,
        "seed": seed,
        "experiment": folder.name,
        "train_dir": str(folder.parent),
    }
    (folder / "config.json").write_text(json.dumps(config))
    wall = wall or [float(i) for i in range(len(returns))]
    lines = ["env_steps,wall_time,episode/return_mean,perf/fps_10s,policy_lag/mean"]
    lines += [
        f"{1000 * (i + 1)},{w},{r},{5000 + i},{2.0}" for i, (r, w) in enumerate(zip(returns, wall))
    ]
    lines.append(f"{1000 * len(returns)},{wall[-1] + 1},,,")  # a row without these metrics
    (folder / "progress.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_runs_of_one_config_are_grouped_and_averaged(tmp_path):
    a = read_run(_fake_run(tmp_path / "a", 1, [10, 20, 30]))
    b = read_run(_fake_run(tmp_path / "b", 2, [30, 40, 50]))
    c = read_run(_fake_run(tmp_path / "c", 1, [1, 2, 3], algorithm="impala"))
    groups = group_runs([a, c, b])
    assert [[r.name for r in g] for g in groups] == [["a", "b"], ["c"]]
    grid, mean, std = mean_and_band(groups[0], "episode/return_mean", "env_steps", points=3)
    np.testing.assert_allclose(grid, [1000, 2000, 3000])
    np.testing.assert_allclose(mean, [20, 30, 40])
    np.testing.assert_allclose(std, [10, 10, 10])


def test_wall_time_continues_across_a_resume(tmp_path):
    run = read_run(_fake_run(tmp_path / "r", 1, [1, 2, 3, 4], wall=[5.0, 10.0, 2.0, 4.0]))
    xs, _ = run.series("episode/return_mean", "wall_time")
    np.testing.assert_allclose(xs, [5.0, 10.0, 12.0, 14.0])


def _windowed_run(tmp_path, rows: str):
    """A run whose rows (env steps, wall time, mean return, games in the window) are `rows`."""
    folder = tmp_path / "resumed"
    folder.mkdir()
    header = "env_steps,wall_time,episode/return_mean,episode/window_episodes\n"
    (folder / "progress.csv").write_text(header + rows)
    return read_run(folder)


def test_a_score_counts_as_reached_only_over_a_full_window_of_episodes(tmp_path):
    # A resume at the third row restarts the window: its 16 games average 20 before 100 do.
    run = _windowed_run(
        tmp_path,
        "1000,10,18.0,100\n2000,20,19.0,100\n3000,5,20.0,16\n4000,15,19.5,60\n5000,25,20.5,100\n",
    )
    assert first_reach(run, 19.0) == (2000.0, 20.0)
    assert first_reach(run, 20.0) == (5000.0, 45.0)  # wall time goes on across the resume
    assert first_reach(run, 21.0) is None


def test_the_curve_leaves_out_a_resumes_refilling_window_but_not_the_first_one(tmp_path):
    run = _windowed_run(
        tmp_path, "1000,10,-20.0,40\n2000,20,-19.0,100\n3000,5,20.0,3\n4000,15,-18.5,100\n"
    )
    xs, ys = run.series("episode/return_mean", "env_steps")
    np.testing.assert_allclose(xs, [1000, 2000, 4000])
    np.testing.assert_allclose(ys, [-20.0, -19.0, -18.5])


def test_first_reach_takes_rows_without_the_window_count_as_full(tmp_path):
    run = read_run(_fake_run(tmp_path / "old", 1, [1, 5, 3]))
    assert first_reach(run, 4.0) == (2000.0, 1.0)


def test_curves_kept_in_a_csv_give_the_same_curves_and_first_reaches(tmp_path):
    resumed = _windowed_run(
        tmp_path,
        "1000,10,18.0,100\n2000,20,19.0,100\n3000,5,20.0,16\n4000,15,19.5,60\n5000,25,20.5,100\n",
    )
    plain = read_run(_fake_run(tmp_path / "plain", 1, [1, 5, 3]))
    kept = read_curves(write_curves({"a/resumed": resumed, "b/plain": plain}, tmp_path / "c.csv"))
    assert list(kept) == ["a/resumed", "b/plain"]
    for label, run in (("a/resumed", resumed), ("b/plain", plain)):
        for x in ("env_steps", "wall_time"):
            np.testing.assert_allclose(kept[label].series(RETURN, x), run.series(RETURN, x))
        for target in (4.0, 19.0, 20.0, 21.0):
            assert first_reach(kept[label], target) == first_reach(run, target)
    # Only the rows with a mean return are kept: the fake run's last row has none.
    assert len(kept["b/plain"].columns["env_steps"]) == 3


def test_plot_writes_a_png(experiment, tmp_path, capsys):
    _fake_run(tmp_path / "seed1", 1, [10, 20, 30])
    _fake_run(tmp_path / "seed2", 2, [20, 30, 50])
    output = tmp_path / "curves.png"
    code = main(
        [
            "plot",
            str(experiment),
            "seed1",
            "seed2",
            "--train_dir",
            str(tmp_path),
            "--output",
            str(output),
        ]
    )
    assert code == 0 and f"wrote {output}" in capsys.readouterr().out
    data = output.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_plot_of_a_missing_experiment_is_bad_input(tmp_path, capsys):
    assert main(["plot", "nothing", "--train_dir", str(tmp_path)]) == 2
    assert "no progress.csv" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["enjoy", "eval", "export", "plot"])
def test_subcommands_are_listed(name, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    assert "usage: sampleforge" in capsys.readouterr().out
