"""A Ctrl-C that arrives while the command is still importing is recorded and acted on at the
next safe point (`cli/signals.py`): exit 130, no traceback, nothing started or written."""

import subprocess
import sys

INTERRUPTED_WHILE_IMPORTING = """\
import os, signal, sys

import sampleforge.cli.main as cli


class InterruptTheImport:
    \"\"\"A Ctrl-C at the moment the command first imports its config package.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "sampleforge.config":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, InterruptTheImport())
sys.exit(cli.main(["train", "--env", "CartPole-v1", "--train_dir", sys.argv[1]]))
"""


def test_a_ctrl_c_during_the_imports_exits_130_before_anything_starts(tmp_path):
    train_dir = tmp_path / "train_dir"
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING, str(train_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not train_dir.exists()  # stopped at the safe point, before the runner
