"""A full disk in a job of two processes is the same one line as in one process, and --resume
continues the run (the other failures that are not the user's: tests/test_not_mistakes.py)."""

import pytest
from conftest import run_main
from test_not_mistakes import failed

import QuantumGravPy as qg


@pytest.mark.timeout(240)
def test_a_full_disk_in_a_job_of_two_processes_is_the_same_line_and_resume_continues(
    config_file, tmp_path, capsys
):
    """Rank 0 writes the checkpoints: its full disk ends the job with its line (not another
    rank's "rank 0 failed"), exit 1, whichever rank ends first; --resume finishes the run."""
    hooks = "[{type: user_data.FillsTheDisk, kwargs: {after: 2}}]"
    cfg = config_file(training={"num_epochs": 4}, parallel={"world_size": 2})
    line = failed(run_main(capsys, "train", cfg, f"training.callbacks={hooks}"))
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    assert "no space left on the device writing" in line and "(epoch 3)" in line, line
    assert f"{last} holds epoch 2, whole" in line and line.endswith("--resume"), line
    # the same command: the callback fills the disk after epoch 2 only, which is past
    resumed = run_main(capsys, "train", cfg, f"training.callbacks={hooks}", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert qg.load_checkpoint(last)["epoch"] == 4
