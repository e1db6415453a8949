"""`worker_cpu_affinity` in the wiring: which core each rollout worker spec carries.

Every generation of rollout worker `w` (the supervisor builds replacements with
`wiring.rollout_worker_spec(w, generation)`) is handed the same core; learners and inference
workers are handed none (they float). The cores are faked here, so nothing is pinned: the
integration test (tests/integration/test_worker_cpu_affinity.py) reads real processes.
"""

from __future__ import annotations

import pytest
import torch

from sampleforge.checkpoint.experiment_dir import prepare_experiment
from sampleforge.components import wiring as wiring_module
from sampleforge.components.wiring import rollout_worker_cores, wire
from sampleforge.config import make_config
from sampleforge.distributed.torchrun_rank import TorchrunRank
from sampleforge.envs.registry import env_info, resolve_env

FAKE_CORES = (3, 5)  # fewer than the workers below, so the assignment wraps


@pytest.fixture(autouse=True)
def fake_cores(monkeypatch):
    monkeypatch.setattr(wiring_module, "usable_cores", lambda: FAKE_CORES)


def _wire(tmp_path, **overrides):
    settings = dict(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        num_workers=3,
        num_envs_per_worker=2,
        rollout=8,
        batch_size=32,
        max_component_restarts=2,
        device="cpu",
        seed=0,
    )
    cfg = make_config(**{**settings, **overrides})
    exp, resume = prepare_experiment(cfg)
    info = env_info(cfg.env)
    return cfg, wire(cfg, resolve_env(cfg.env), info, torch.device("cpu"), exp, resume)


def _cores_by_generation(cfg, wiring) -> list[list[int | None]]:
    """[worker][generation] -> the core its spec carries."""
    assert wiring.rollout_worker_spec is not None
    return [
        [
            wiring.rollout_worker_spec(w, g).kwargs["cpu_core"]
            for g in range(cfg.max_component_restarts + 1)
        ]
        for w in range(cfg.num_workers)
    ]


def test_each_worker_and_its_replacements_get_one_core_round_robin(tmp_path):
    cfg, wiring = _wire(tmp_path, worker_cpu_affinity=True)
    first = {s.index: s.kwargs["cpu_core"] for s in wiring.specs if s.kind == "rollout_worker"}
    assert first == {0: 3, 1: 5, 2: 3}  # round-robin, wrapping past the last core
    assert _cores_by_generation(cfg, wiring) == [[3, 3, 3], [5, 5, 5], [3, 3, 3]]


def test_learners_and_inference_workers_are_never_pinned(tmp_path):
    _, wiring = _wire(tmp_path, worker_cpu_affinity=True)
    floating = [s for s in wiring.specs if s.kind != "rollout_worker"]
    assert {s.kind for s in floating} == {"learner", "inference_worker"}
    assert all("cpu_core" not in s.kwargs for s in floating)


def test_without_the_setting_no_worker_is_pinned(tmp_path):
    cfg, wiring = _wire(tmp_path)
    assert _cores_by_generation(cfg, wiring) == [[None] * 3] * 3


def test_ranks_on_one_node_start_on_different_cores(monkeypatch):
    monkeypatch.setattr(wiring_module, "usable_cores", lambda: (0, 1, 2, 3))
    cfg = make_config(num_workers=2, worker_cpu_affinity=True)
    ranks = [TorchrunRank(r, 2, r, "127.0.0.1", 29500, agent_store=False) for r in (0, 1)]
    assert [rollout_worker_cores(cfg, rank) for rank in ranks] == [[0, 1], [2, 3]]
    assert rollout_worker_cores(cfg) == [0, 1]
