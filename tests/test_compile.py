"""training.compile: the model compiled with torch.compile trains in one process and under DDP,
and its checkpoints resume compiled or not."""

import pytest
import torch
from conftest import assert_refused, run_main


@pytest.mark.timeout(600)
def test_a_compiled_model_trains_and_resumes_compiled_or_not(config_file, capsys, tmp_path):
    """One compile per process (torch's cache serves the later ones): a compiled epoch, an
    uncompiled one resumed from it, then a third resumed compiled in two processes."""
    path = config_file(training={"compile": True, "num_epochs": 1})
    two = ["parallel.world_size=2", "training.batch_size=16"]  # the same 32 graphs a step
    for epochs, compiled, processes in ((1, "true", []), (2, "false", []), (3, "true", two)):
        resume = ["--resume"] if epochs > 1 else []
        result = run_main(
            capsys, "train", path, f"training.num_epochs={epochs}",
            f"training.compile={compiled}", *processes, *resume,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert [row["epoch"] for row in state["history"]] == [1, 2, 3]
    assert not any("_orig_mod" in key for key in state["model"])  # the plain module's keys
    losses = [row["train_loss"] for row in state["history"]]
    assert losses[-1] < losses[0]
    assert (
        "resuming a run trained with 1 process(es) on 2"
        in (tmp_path / "run" / "train.log").read_text()
    )


def test_compile_with_fsdp_is_refused(config_file, capsys):
    path = config_file(training={"compile": True}, parallel={"strategy": "fsdp"})
    assert_refused(run_main(capsys, "train", path), "training.compile", "fsdp")
