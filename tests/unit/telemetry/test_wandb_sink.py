"""The W&B sink (with_wandb), in W&B's offline mode: what it logs is read back from the run's
``.wandb`` file, the transaction log W&B itself uploads with ``wandb sync``.

Every test that starts a run points W&B's folders (and HOME) into tmp_path and checks that HOME
stays empty; offline mode opens no network connection.
"""

from __future__ import annotations

import csv
import json
import math
import struct
import sys
import time
import zlib
from pathlib import Path

import pytest

from sampleforge.config import ConfigError, config_to_dict, make_config
from sampleforge.telemetry import MetricsWriter
from sampleforge.telemetry.wandb_sink import INSTALL_HINT, RUN_ID_NAME, wandb_problem

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """W&B in offline mode with every folder it writes to inside tmp_path."""
    wandb = pytest.importorskip("wandb")
    home = tmp_path / "home"
    home.mkdir()
    for name in (
        "WANDB_API_KEY",
        "WANDB_BASE_URL",
        "WANDB_ENTITY",
        "WANDB_PROJECT",
        "WANDB_RUN_ID",
        "WANDB_RESUME",
        "WANDB_RUN_GROUP",
        "WANDB_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    for name, sub in (
        ("WANDB_DIR", "wandb_dir"),
        ("WANDB_CACHE_DIR", "wandb_cache"),
        ("WANDB_CONFIG_DIR", "wandb_config"),
        ("WANDB_DATA_DIR", "wandb_data"),
        ("WANDB_ARTIFACT_DIR", "wandb_artifacts"),
    ):
        monkeypatch.setenv(name, str(tmp_path / sub))
    yield
    # Stop W&B's service process, which read the environment above when it started.
    wandb.teardown()
    assert list(home.iterdir()) == []


def _config(tmp_path: Path, **overrides):
    settings = dict(
        train_dir=str(tmp_path / "train_dir"),
        experiment="exp_a",
        with_wandb=True,
        wandb_project="proj",
        wandb_group="grp",
        tensorboard=False,
        device="cpu",
    )
    return make_config(**{**settings, **overrides})


# --- reading the offline run back ---------------------------------------------------------------
def _records(path: Path):
    """The records of a .wandb file: a LevelDB-style log (7-byte file header, 32 KiB blocks of
    chunks with a crc32/length/type header) of wandb's own protobuf `Record`s. A chunk still
    being written ends the list."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        if kind == 0 or len(chunk) < length:
            break
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad chunk at {pos}"
        pos += 7 + length
        pending += chunk
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def _value(item):
    if item.value_json:
        return json.loads(item.value_json)
    return getattr(item, item.WhichOneof("value")) if item.WhichOneof("value") else None


def _finished_records(path: Path, timeout: float = 30.0) -> list:
    """The records of a finished run. W&B's service writes the file through a buffer that it
    may flush just after `finish()` returns; the exit record comes last."""
    deadline = time.monotonic() + timeout
    while True:
        records = list(_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record after {timeout} s"
        time.sleep(0.05)


class OfflineRun:
    """What one offline run directory recorded."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        (log,) = run_dir.glob("run-*.wandb")
        self.run = None
        self.config: dict = {}
        self.history: list[dict] = []
        for record in _finished_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                self.run = record.run
                self.config.update(
                    {_key(i): json.loads(i.value_json) for i in record.run.config.update}
                )
            elif kind == "config":
                self.config.update(
                    {_key(i): json.loads(i.value_json) for i in record.config.update}
                )
            elif kind == "history":
                self.history.append({_key(i): _value(i) for i in record.history.item})
        self.config.pop("_wandb", None)

    def rows(self) -> list[tuple[int, dict]]:
        """(env_steps, scalars) of each logged row, W&B's own keys (_step, ...) left out."""
        return [
            (
                row["env_steps"],
                {k: v for k, v in row.items() if k != "env_steps" and not k.startswith("_")},
            )
            for row in self.history
        ]


def _offline_runs(experiment_dir: Path) -> list[OfflineRun]:
    return [OfflineRun(d) for d in sorted((experiment_dir / "wandb").glob("offline-run-*"))]


# --- the sink -----------------------------------------------------------------------------------
ROWS = [
    (100, {"perf/fps": 50.0, "episode/return_mean": 1.5}),
    (200, {"perf/fps": 60.25, "episode/return_mean": -2.5}),
    (300, {"perf/fps": 70.0, "losses/policy": -0.125}),
]


def test_scalars_reach_the_run_at_their_env_steps(tmp_path, offline_wandb):
    cfg = _config(tmp_path)
    exp = tmp_path / "train_dir" / "exp_a"
    with MetricsWriter.for_run(cfg, exp) as writer:
        for env_steps, scalars in ROWS:
            writer.write(env_steps, {**scalars, "skipped": None})
    (run,) = _offline_runs(exp)
    assert run.rows() == ROWS
    assert run.run.display_name == "exp_a"
    assert run.run.project == "proj" and run.run.run_group == "grp"
    assert run.run.run_id == (exp / RUN_ID_NAME).read_text().strip()
    assert (exp / "progress.csv").exists()  # the CSV is still written beside it


def test_the_full_config_is_the_run_config(tmp_path, offline_wandb):
    cfg = _config(
        tmp_path,
        learning_rate=1e-3,
        mlp_hidden_sizes="32,16",
        seed=7,
        stop_at_mean_return=float("inf"),
    )
    exp = tmp_path / "train_dir" / "exp_a"
    MetricsWriter.for_run(cfg, exp).close()
    (run,) = _offline_runs(exp)
    assert run.config == config_to_dict(cfg)
    assert run.config["learning_rate"] == 1e-3 and run.config["mlp_hidden_sizes"] == [32, 16]
    assert math.isinf(run.config["stop_at_mean_return"])


def test_resumed_experiment_continues_its_run(tmp_path, offline_wandb):
    cfg = _config(tmp_path)
    exp = tmp_path / "train_dir" / "exp_a"
    with MetricsWriter.for_run(cfg, exp) as writer:
        writer.write(1000, {"perf/fps": 1.0})
        writer.write(2000, {"perf/fps": 2.0})
    run_id = (exp / RUN_ID_NAME).read_text().strip()
    # Resumed from a checkpoint at 1,500 env steps: rows below the last logged one still count.
    with MetricsWriter.for_run(cfg.replace(train_for_env_steps=10**8), exp) as writer:
        writer.write(1500, {"perf/fps": 3.0})
    first, second = _offline_runs(exp)
    assert first.run.run_id == second.run.run_id == run_id
    assert (exp / RUN_ID_NAME).read_text().strip() == run_id
    assert second.rows() == [(1500, {"perf/fps": 3.0})]
    assert second.config["train_for_env_steps"] == 10**8
    # Another experiment gets a run of its own.
    other = tmp_path / "train_dir" / "exp_b"
    MetricsWriter.for_run(cfg.replace(experiment="exp_b"), other).close()
    (run_b,) = _offline_runs(other)
    assert run_b.run.run_id != run_id and run_b.run.display_name == "exp_b"


def test_without_with_wandb_nothing_is_logged(tmp_path, offline_wandb):
    exp = tmp_path / "train_dir" / "exp_a"
    with MetricsWriter.for_run(_config(tmp_path, with_wandb=False), exp) as writer:
        writer.write(100, {"perf/fps": 1.0})
    assert not (exp / "wandb").exists() and not (exp / RUN_ID_NAME).exists()


def test_a_run_that_cannot_start_is_a_one_line_config_error(tmp_path, offline_wandb, monkeypatch):
    import wandb

    def refuse(**kwargs):  # what wandb.init raises online without an API key
        raise wandb.errors.UsageError(
            "No API key configured. Use `wandb login` to log in.\n(details)"
        )

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(ConfigError) as raised:
        MetricsWriter.for_run(_config(tmp_path), tmp_path / "train_dir" / "exp_a")
    (problem,) = raised.value.problems
    assert "\n" not in problem and "No API key configured" in problem
    assert "WANDB_MODE=offline" in problem


# --- wandb not installed ------------------------------------------------------------------------
@pytest.fixture
def wandb_missing(monkeypatch: pytest.MonkeyPatch):
    """`import wandb` raises ImportError, as when the extra is not installed."""
    for name in [m for m in sys.modules if m == "wandb" or m.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)


def test_missing_package_is_a_one_line_config_error(tmp_path, wandb_missing):
    cfg = _config(tmp_path)
    problem = wandb_problem(cfg)
    assert problem is not None and "\n" not in problem and INSTALL_HINT in problem
    assert INSTALL_HINT == "pip install 'sampleforge[wandb]'"
    assert wandb_problem(cfg.replace(with_wandb=False)) is None
    exp = tmp_path / "train_dir" / "exp_a"
    with pytest.raises(ConfigError) as raised:
        MetricsWriter.for_run(cfg, exp)
    assert raised.value.problems == [problem]
    assert not (exp / "progress.csv").exists()  # nothing opened before the check


def test_train_without_the_package_fails_before_any_process_starts(
    tmp_path, wandb_missing, monkeypatch, capsys
):
    from sampleforge.cli.main import main
    from sampleforge.comms.hosts import InlineHost, ProcessHost

    started = []
    for host in (ProcessHost, InlineHost):
        monkeypatch.setattr(host, "start", lambda self, spec: started.append(spec.name))
    code = main(
        [
            "train",
            "--env",
            "CartPole-v1",
            "--train_dir",
            str(tmp_path / "train_dir"),
            "--num_workers",
            "1",
            "--device",
            "cpu",
            "--tensorboard",
            "false",
            "--with_wandb",
            "true",
        ]
    )
    assert code == 2
    assert started == []
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("sampleforge:")
    ]
    assert len(errors) == 1 and INSTALL_HINT in errors[0]
    # Refused before the experiment folder is prepared: an `--restart_behavior overwrite`
    # would otherwise have deleted the previous run first.
    assert not (tmp_path / "train_dir").exists()


# --- end to end ---------------------------------------------------------------------------------
def test_training_run_logs_what_progress_csv_holds(tmp_path, offline_wandb):
    """CartPole, one rollout worker process: every row of progress.csv is a row of the W&B run,
    at the same env steps, and the run config is config.json's settings."""
    from sampleforge.components.runner import Runner

    cfg = _config(
        tmp_path,
        env="CartPole-v1",
        num_workers=1,
        num_envs_per_worker=8,
        seed=1,
        # Long enough for several reports on a fast machine too: a 2,000-step run once ended
        # within its first 0.2 s report.
        train_for_env_steps=20_000,
        stop_at_mean_return=float("inf"),
        report_every_sec=0.1,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.env_steps >= 20_000
    exp = runner.exp.path
    (run,) = _offline_runs(exp)
    with open(exp / "progress.csv", newline="") as f:
        csv_rows = [
            (
                int(row["env_steps"]),
                {
                    k: float(v)
                    for k, v in row.items()
                    if k not in ("env_steps", "wall_time") and v != ""
                },
            )
            for row in csv.DictReader(f)
        ]
    assert len(csv_rows) >= 2 and csv_rows[-1][0] >= 20_000
    assert run.rows() == csv_rows
    saved = json.loads((exp / "config.json").read_text())
    assert run.config == {k: v for k, v in saved.items() if k in config_to_dict(cfg)}
    assert run.run.display_name == cfg.experiment_name
