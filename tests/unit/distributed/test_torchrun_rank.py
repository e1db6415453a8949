"""rank_config and scratch_dir: what a rank changes of the run's config, and where a rank > 0
keeps its files."""

import dataclasses

import pytest

from sampleforge.config import make_config
from sampleforge.distributed.torchrun_rank import TorchrunRank, rank_config, scratch_dir


def rank(number: int, restart: int = 0, run_id: str = "job", port: int = 29500) -> TorchrunRank:
    return TorchrunRank(
        rank=number,
        world_size=2,
        local_rank=number,
        master_addr="127.0.0.1",
        master_port=port,
        agent_store=False,
        restart=restart,
        run_id=run_id,
    )


@pytest.fixture
def cfg(tmp_path):
    return make_config(env="CartPole-v1", train_dir=str(tmp_path), restart_behavior="overwrite")


def test_a_restarted_job_resumes_rank_0s_experiment_instead_of_overwriting_it_again(cfg):
    # torchrun --max-restarts re-runs the first command line: overwrite would delete the run.
    assert rank_config(cfg, rank(0, restart=0), "").restart_behavior == "overwrite"
    assert rank_config(cfg, rank(0, restart=1), "").restart_behavior == "resume"
    resumed = dataclasses.replace(cfg, restart_behavior="resume")
    assert rank_config(resumed, rank(0, restart=2), "").restart_behavior == "resume"


def test_other_ranks_start_their_scratch_folder_afresh_at_every_attempt(cfg, tmp_path):
    for restart in (0, 1):
        other = rank_config(cfg, rank(1, restart=restart), str(tmp_path / "scratch"))
        assert other.restart_behavior == "overwrite"
        assert other.train_dir == str(tmp_path / "scratch")


def test_jobs_under_a_static_rendezvous_get_scratch_folders_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    # torchrun names every statically rendezvoused job "none": the port tells them apart.
    first = scratch_dir(rank(1, run_id="none", port=29500))
    (tmp_path / first / "in_use").write_text("a running job's files")
    second = scratch_dir(rank(1, run_id="none", port=29600))
    assert first != second
    assert (tmp_path / first / "in_use").exists()
    # The same job's restarted rank clears what its predecessor left.
    assert scratch_dir(rank(1, run_id="none", port=29500)) == first
    assert not (tmp_path / first / "in_use").exists()
