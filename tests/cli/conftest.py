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


@pytest.fixture(scope="session")
def dqn_experiment(tmp_path_factory) -> Path:
    """train_dir/dqn: 3k env steps of DQN on CartPole-v1 (a light replay ratio), evaluated
    every 1.5k steps: a value-based run for the policy commands."""
    train_dir = tmp_path_factory.mktemp("cli_dqn")
    code = main(
        [
            "train",
            "--algorithm",
            "dqn",
            "--env",
            "CartPole-v1",
            "--train_dir",
            str(train_dir),
            "--experiment",
            "dqn",
            "--seed",
            "1",
            "--device",
            "cpu",
            "--num_workers",
            "1",
            "--train_for_env_steps",
            "3000",
            "--learning_starts",
            "500",
            "--samples_per_insert",
            "4",
            "--stop_at_mean_return",
            "inf",
            "--eval_every_env_steps",
            "1500",
            "--eval_episodes",
            "2",
            "--report_every_sec",
            "60",
            "--tensorboard",
            "false",
        ]
    )
    assert code == 0
    return train_dir / "dqn"


@pytest.fixture(scope="session")
def sac_experiment(tmp_path_factory) -> Path:
    """train_dir/sac: 3k env steps of SAC on Pendulum-v1 (small networks, a light replay ratio),
    evaluated every 1.5k steps: a continuous-control run for the policy commands."""
    train_dir = tmp_path_factory.mktemp("cli_sac")
    flags = {
        "algorithm": "sac",
        "env": "Pendulum-v1",
        "train_dir": str(train_dir),
        "experiment": "sac",
        "seed": "1",
        "device": "cpu",
        "train_for_env_steps": "3000",
        "learning_starts": "500",
        "random_action_steps": "500",
        "samples_per_insert": "32",
        "batch_size": "64",
        "mlp_hidden_sizes": "32,32",
        "normalize_obs": "true",
        "eval_every_env_steps": "1500",
        "eval_episodes": "2",
        "report_every_sec": "60",
        "tensorboard": "false",
    }
    code = main(["train", *[a for k, v in flags.items() for a in (f"--{k}", v)]])
    assert code == 0
    return train_dir / "sac"
