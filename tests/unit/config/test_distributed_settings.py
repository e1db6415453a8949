"""Settings of data-parallel runs: each refusal is one line naming the value and what to do."""

import pytest

from sampleforge.components.runner import Runner
from sampleforge.config import ConfigError, make_config
from sampleforge.models.factory import resolve_device

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def test_distributed_outside_torchrun_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    cfg = make_config(env="CartPole-v1", distributed=True, train_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="needs torchrun's environment .*RANK"):
        Runner(cfg)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "setting",
    [
        {"serial_mode": True},
        {"with_pbt": True, "num_policies": 2},
        {"algorithm": "crossq", "env": "Pendulum-v1"},
    ],
)
def test_what_data_parallel_training_cannot_combine_with_is_refused(setting):
    with pytest.raises(ConfigError, match=r"distributed: \w+ true cannot be combined"):
        make_config(**{"env": "CartPole-v1", "distributed": True, **setting})


@pytest.mark.parametrize("device", ["cuda:x", "gpu", "cuda:"])
def test_a_malformed_device_is_refused(device):
    with pytest.raises(ConfigError, match=f"device: '{device}' is not one of"):
        make_config(env="CartPole-v1", device=device)


def test_a_gpu_torch_does_not_see_is_refused_with_the_count(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match="cuda:3 was asked for .* sees 0 CUDA device"):
        resolve_device("cuda:3")
    assert make_config(env="CartPole-v1", device="cuda:3").device == "cuda:3"  # the form is fine
