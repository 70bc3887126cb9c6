"""parallel.strategy: zero trains as ddp does, and its checkpoints are plain ones that any
strategy and any number of processes resumes."""

import json

import pytest
import torch
from conftest import ROOT, assert_refused, run_main

SHIPPED = ROOT / "configs" / "train_ddp.yaml"


def small(tmp_path, data_root, name, *extra):
    return [
        f"data.root={data_root}", "data.num_graphs=160", "data.num_points=[16, 32]",
        "model.hidden_channels=16", "model.num_layers=2", "training.batch_size=8",
        "training.device=cpu", f"training.path={tmp_path / name}", "log_level=INFO", *extra,
    ]  # fmt: skip


def last(run):
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision, tolerance", [("64", 1e-10), ("32", 1e-5)])
def test_zero_trains_the_shipped_config_as_ddp_does(
    tmp_path, data_root, capsys, precision, tolerance
):
    """After 2 epochs, the same weights and optimizer state (the plain optimizer's, in the
    checkpoint) and the same accuracy; the log and environment.json name the strategy."""
    runs = {}
    for strategy in ("ddp", "zero"):
        args = small(tmp_path, data_root, strategy, "training.num_epochs=2",
                     f"training.precision={precision}", f"parallel.strategy={strategy}")  # fmt: skip
        result = run_main(capsys, "train", SHIPPED, *args)
        assert result.returncode == 0, result.stderr
        runs[strategy] = tmp_path / strategy
    ddp, zero = last(runs["ddp"]), last(runs["zero"])
    assert largest_difference(zero["model"], ddp["model"]) <= tolerance
    states = zero["optimizer"]["state"], ddp["optimizer"]["state"]
    assert states[0].keys() == states[1].keys()
    for i in states[1]:
        assert largest_difference(states[0][i], states[1][i]) <= tolerance
    assert zero["history"][-1]["val_accuracy"] == pytest.approx(
        ddp["history"][-1]["val_accuracy"], abs=0.02
    )
    assert "strategy zero" in (runs["zero"] / "train.log").read_text()
    assert json.loads((runs["zero"] / "environment.json").read_text())[-1]["strategy"] == "zero"


@pytest.mark.timeout(300)
def test_a_zero_checkpoint_resumes_in_one_process_and_is_tested(tmp_path, data_root, capsys):
    """Checkpoints hold the plain optimizer's state: a 2-rank zero run continues as one process
    (with ddp's numbering of the parameters) and `qg test` reads its best.pt."""
    args = small(tmp_path, data_root, "run", "parallel.strategy=zero", "training.precision=64")
    first = run_main(capsys, "train", SHIPPED, *args, "training.num_epochs=2")
    assert first.returncode == 0, first.stderr
    one = ("parallel.world_size=1", "training.batch_size=16", "training.num_epochs=3")
    again = run_main(capsys, "train", SHIPPED, *args, *one, "--resume")
    assert again.returncode == 0, again.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resumed from" in log
    assert "zero shares the optimizer state between processes; with one process" in log
    assert [row["epoch"] for row in last(tmp_path / "run")["history"]] == [1, 2, 3]
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    tested = run_main(capsys, "test", SHIPPED, *args, *one, "--checkpoint", best)
    assert tested.returncode == 0, tested.stderr
    assert "test_accuracy" in tested.stdout + tested.stderr


def test_an_unknown_strategy_is_refused(tmp_path, data_root, capsys):
    result = run_main(
        capsys, "train", SHIPPED, *small(tmp_path, data_root, "x"), "parallel.strategy=zer0"
    )
    assert_refused(result, "parallel.strategy", "zero")
