"""training.compile: the model compiled with torch.compile trains in one process and under DDP,
and its checkpoints resume compiled or not."""

import pytest
import torch
from conftest import assert_refused, run_main


@pytest.mark.timeout(600)
def test_a_compiled_model_trains_and_resumes_compiled_or_not(config_file, capsys, tmp_path):
    """One compile per process (torch's cache serves the later ones): a compiled epoch, an
    uncompiled one resumed from it, a compiled one again; then two compiled processes."""
    path = config_file(training={"compile": True, "num_epochs": 1})
    for epochs, compiled in ((1, "true"), (2, "false"), (3, "true")):
        resume = ["--resume"] if epochs > 1 else []
        result = run_main(
            capsys, "train", path, f"training.num_epochs={epochs}",
            f"training.compile={compiled}", *resume,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert [row["epoch"] for row in state["history"]] == [1, 2, 3]
    assert not any("_orig_mod" in key for key in state["model"])  # the plain module's keys
    losses = [row["train_loss"] for row in state["history"]]
    assert losses[-1] < losses[0]
    two = run_main(
        capsys, "train", path, "parallel.world_size=2", f"training.path={tmp_path / 'ddp'}",
    )  # fmt: skip
    assert two.returncode == 0, two.stderr
    assert "finished: 1 epochs" in (tmp_path / "ddp" / "train.log").read_text()


def test_compile_with_fsdp_is_refused(config_file, capsys):
    path = config_file(training={"compile": True}, parallel={"strategy": "fsdp"})
    assert_refused(run_main(capsys, "train", path), "training.compile", "fsdp")
