"""One small trained experiment shared by the CLI tests (trained once, through the CLI)."""

from pathlib import Path

import pytest

from sampleforge.cli.main import main


@pytest.fixture(scope="session")
def experiment(tmp_path_factory) -> Path:
    """train_dir/cartpole: 20k env steps of CartPole-v1, evaluated every 8k steps."""
    train_dir = tmp_path_factory.mktemp("cli")
    code = main(
        [
            "train",
            "--env",
            "CartPole-v1",
            "--train_dir",
            str(train_dir),
            "--experiment",
            "cartpole",
            "--seed",
            "1",
            "--device",
            "cpu",
            "--train_for_env_steps",
            "20000",
            "--stop_at_mean_return",
            "inf",
            "--eval_every_env_steps",
            "8000",
            "--eval_episodes",
            "2",
            "--report_every_sec",
            "60",
            "--tensorboard",
            "false",
        ]
    )
    assert code == 0
    return train_dir / "cartpole"
