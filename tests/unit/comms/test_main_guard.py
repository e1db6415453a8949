"""raise_unless_main_guarded: a script that would train again in every worker is refused in
one line; a guarded one, and whatever the check cannot read, pass."""

import multiprocessing
import subprocess
import sys
import textwrap

import pytest

from sampleforge.comms.main_guard import MainModuleNotGuarded, raise_unless_main_guarded

CHECK = "from sampleforge.comms.main_guard import raise_unless_main_guarded as check\n"


def run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train_script.py"
    script.write_text(CHECK + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "body, line",
    [
        ('check("DQN(...)")\nprint("went on")\n', 1),
        # A function the unguarded top level calls: the call's line is named.
        ('def main():\n    check("DQN(...)")\n\n\nmain()\nprint("went on")\n', 5),
        # A guard that is not one: the test must be __name__ against "__main__".
        ('if __name__ == "sampleforge":\n    pass\nelse:\n    check("DQN(...)")\n', 4),
    ],
)
def test_training_at_a_scripts_top_level_is_refused_in_one_line_naming_the_line(
    tmp_path, body, line
):
    # `line` counts in `body`; the script starts with the import of the check.
    result = run_script(tmp_path, body)
    assert result.returncode != 0
    assert "went on" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sampleforge.comms.main_guard.MainModuleNotGuarded: ")
    assert f"train_script.py:{line + 1}: DQN(...) is called at the script's top level" in last
    assert 'if __name__ == "__main__":' in last


@pytest.mark.parametrize(
    "body",
    [
        'if __name__ == "__main__":\n    check("DQN(...)")\n    print("went on")\n',
        'def main():\n    check("DQN(...)")\n    print("went on")\n\n\n'
        'if "__main__" == __name__:\n    main()\n',
        'if __name__ != "__main__":\n    pass\nelse:\n    check("x")\n    print("went on")\n',
        'import sys\nif __name__ == "__main__" and len(sys.argv) > 0:\n'
        '    check("x")\n    print("went on")\n',
        # Called from a thread: no top-level frame on its stack, nothing to tell.
        'import threading\nt = threading.Thread(target=check, args=("x",))\nt.start()\n'
        't.join()\nprint("went on")\n',
    ],
)
def test_a_guarded_call_passes(tmp_path, body):
    result = run_script(tmp_path, body)
    assert result.returncode == 0, result.stderr
    assert "went on" in result.stdout


def test_a_call_while_a_worker_imports_the_script_is_refused():
    process = multiprocessing.current_process()
    process._inheriting = True  # what spawn and the fork server set while a child imports
    try:
        with pytest.raises(MainModuleNotGuarded, match="while a worker process imported"):
            raise_unless_main_guarded("DQN(...)")
    finally:
        del process._inheriting


def test_the_python_api_refuses_an_unguarded_script_before_it_makes_the_experiment(tmp_path):
    train_dir = tmp_path / "runs"
    result = run_script(
        tmp_path,
        f"""
        from sampleforge import DQN
        model = DQN("CartPole-v1", train_dir={str(train_dir)!r}, experiment="e")
        print("went on")
        """,
    )
    assert result.returncode != 0
    assert "train_script.py:4: DQN(...) is called at the script's top level" in result.stderr
    assert "went on" not in result.stdout
    assert not train_dir.exists()
