"""Bad command-line values are refused by the parser with one line (enjoy's own flags, and an
unknown training flag)."""

import pytest

from sampleforge.cli.main import main


@pytest.mark.parametrize("fps", ["-5", "0", "inf", "nan", "fast"])
def test_a_frame_rate_that_is_not_a_positive_number_is_refused_in_one_line(tmp_path, capsys, fps):
    with pytest.raises(SystemExit) as info:
        main(["enjoy", "--train_dir", str(tmp_path), "--experiment", "x", "--fps", fps])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # not argparse's usage first
    assert line.startswith("sampleforge enjoy: error: argument --fps: ")
    assert "allowed: a finite number > 0" in line or f"'{fps}' is not a number" in line


def test_an_unknown_training_flag_is_one_line_with_a_hint(capsys):
    """`train`'s usage would list every setting before the error: the error stands alone."""
    with pytest.raises(SystemExit) as info:
        main(["train", "--num_worker", "3"])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unrecognized arguments: --num_worker 3" in line
    assert "did you mean '--num_workers'" in line and "see sampleforge --help" in line


def test_a_flag_of_another_command_is_named_as_such_not_suggested_as_itself(capsys):
    """`enjoy --num_processes` once got "did you mean '--num_processes'?": the hint looked
    through every command's flags and found the very flag refused."""
    with pytest.raises(SystemExit) as info:
        main(["enjoy", "--num_processes", "1"])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "(--num_processes is a flag of sampleforge eval)" in line
    assert "did you mean" not in line
