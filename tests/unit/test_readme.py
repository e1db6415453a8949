"""The README's first two commands are the ones users and CI run: keep them true."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line.strip() for line in lines if line.startswith("    python3 -m venv")]


def test_readme_opens_with_train_and_test_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert "sampleforge train --env CartPole-v1" in commands[0]
    assert "pip install torch==2.13.0" in commands[0] and "pip install torch==2.13.0" in commands[1]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci
