"""What a run writes loads back as it was written, and nothing else does: a model moved in from
the predecessor (``TensorInputs``) predicts, tests, resumes and starts another run; a checkpoint
whose bytes changed on disk, or that holds what no run writes, is one line naming it; and
``--resume --force`` trains with the optimizer and schedule settings it says it applies."""

import zipfile

import pytest
import torch
from conftest import assert_refused, run_main, write_config

# The predecessor's model, written forward(x, edge_index, batch) with its width as in_features.
MIGRATED = (
    "model={type: QuantumGravPy.models.TensorInputs, kwargs: {module: {object: "
    "user_models.PredecessorGNN}, module_kwargs: {hidden_channels: 16, out_channels: 3}}}"
)


def flip_a_weight_byte(path):
    """One byte in the middle of the largest tensor's bytes flipped, as a failing disk does."""
    with zipfile.ZipFile(path) as archive:
        member = max(
            (i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size
        )
    with open(path, "r+b") as f:
        f.seek(member.header_offset + 26)
        name_length, extra_length = (
            int.from_bytes(f.read(2), "little"),
            int.from_bytes(f.read(2), "little"),
        )
        f.seek(member.header_offset + 30 + name_length + extra_length + member.file_size // 2)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0x10]))
    return member.filename


def test_a_migrated_model_predicts_tests_resumes_and_starts_another_run(
    make_config, tmp_path, capsys
):
    cfg = make_config(MIGRATED, "training.num_epochs=2")
    path = write_config(cfg, tmp_path / "migrated.yaml")
    run = cfg.training.path
    trained = run_main(capsys, "train", path)  # in_features given by the adapter
    assert trained.returncode == 0, trained.stderr
    best = f"{run}/checkpoints/best.pt"
    assert set(torch.load(best, weights_only=True)["model"]) >= {"module.conv.bias"}

    tested = run_main(capsys, "test", path, "--checkpoint", best)
    assert tested.returncode == 0, tested.stderr
    predicted = run_main(capsys, "predict", run, "--split", "test")
    assert predicted.returncode == 0, predicted.stderr
    resumed = run_main(capsys, "train", path, "--resume", "training.num_epochs=3")
    assert resumed.returncode == 0, resumed.stderr
    other = run_main(capsys, "train", path, f"model.init_from={run}",
                     f"training.path={tmp_path / 'other'}")  # fmt: skip
    assert other.returncode == 0, other.stderr

    # The Migrating page's recipe: the predecessor's checkpoint holds its model's state dict,
    # saved alone and started from as it is (its names lack the adapter's "module.").
    weights = torch.load(best, weights_only=True)["model"]
    predecessor = {"model": {k.removeprefix("module."): v for k, v in weights.items()},
                   "optimizer": {}, "epoch": 7}  # fmt: skip
    torch.save(predecessor["model"], tmp_path / "weights.pt")
    moved = run_main(capsys, "train", path, f"model.init_from={tmp_path / 'weights.pt'}",
                     f"training.path={tmp_path / 'moved'}", "log_level=INFO")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    log = (tmp_path / "moved" / "train.log").read_text()
    assert f"of the model's {len(weights)} tensors from" in log and "left as built" not in log


@pytest.fixture
def trained(make_config, tmp_path, capsys):
    cfg = make_config("training.num_epochs=2")
    path = write_config(cfg, tmp_path / "run.yaml")
    result = run_main(capsys, "train", path)
    assert result.returncode == 0, result.stderr
    return path, tmp_path / "run"


def test_a_checkpoint_changed_on_disk_is_refused_naming_it_wherever_it_is_read(
    trained, tmp_path, capsys
):
    path, run = trained
    best, last = run / "checkpoints" / "best.pt", run / "checkpoints" / "last.pt"
    plain = tmp_path / "weights.pt"
    torch.save(torch.load(best, weights_only=True)["model"], plain)
    for file in (best, last, plain):
        flip_a_weight_byte(file)
    corrupt = "no longer matches the checksum it was written with"
    for args, file in (
        (("test", path, "--checkpoint", best), best),
        (("predict", run, "--split", "test"), best),
        (("train", path, "--resume", "training.num_epochs=3"), last),
        (("train", path, f"model.init_from={best}", f"training.path={tmp_path / 'a'}"), best),
        (("train", path, f"model.init_from={plain}", f"training.path={tmp_path / 'b'}"), plain),
    ):
        assert_refused(run_main(capsys, *args), str(file), corrupt, "checkpoints/best.pt")


def test_a_checkpoint_holding_what_no_run_writes_is_one_line(trained, tmp_path, capsys):
    path, run = trained
    state = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    for name, change, words in (
        ("spec", {"model_spec": "GNNModel"}, "its 'model_spec' is a str (expected dict or null)"),
        ("ema", {"ema": {"decay": 0.5}}, "its 'ema' holds no 'model' weights"),
        ("epoch", {"epoch": "3"}, "its 'epoch' is a str (expected int)"),
    ):
        odd = tmp_path / f"{name}.pt"
        torch.save({**state, **change}, odd)
        for args in (("predict", run, "--split", "test", "--checkpoint", odd),
                     ("test", path, "--checkpoint", odd)):  # fmt: skip
            assert_refused(run_main(capsys, *args), str(odd), words)


@pytest.mark.parametrize(
    "schedule",
    [
        "training.lr_scheduler=null",
        "training.lr_scheduler={type: torch.optim.lr_scheduler.CosineAnnealingLR, kwargs: "
        "{T_max: 4}}",
        "training.lr_scheduler={type: torch.optim.lr_scheduler.OneCycleLR, interval: step, "
        "kwargs: {max_lr: 0.01, total_steps: 60}}",
        "training.lr_scheduler={type: torch.optim.lr_scheduler.ReduceLROnPlateau, kwargs: "
        "{patience: 0, factor: 0.5}}",
    ],
    ids=["constant", "cosine", "per-step", "plateau"],
)
def test_resume_force_trains_with_the_optimizer_and_schedule_it_says(
    schedule, make_config, tmp_path, capsys
):
    """--resume --force with another rate, weight decay and schedule length: the resumed
    epochs train with them, as a run that had them from its start would at that epoch."""
    cfg = make_config(
        schedule,
        "training.num_epochs=2",
        "training.optimizer.kwargs={lr: 0.003, weight_decay: 0.01}",
    )
    path = write_config(cfg, tmp_path / "c.yaml")
    assert run_main(capsys, "train", path).returncode == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "last.pt"
    cut = (
        torch.load(checkpoint, weights_only=True)["optimizer"]["param_groups"][0]["lr"]
        / cfg.training.optimizer.kwargs["lr"]
    )
    new = ["training.optimizer.kwargs.lr=0.0005", "training.optimizer.kwargs.weight_decay=0.1"]
    if "T_max" in schedule:
        new.append("training.lr_scheduler.kwargs.T_max=10")
    if "total_steps" in schedule:
        new.append("training.lr_scheduler.kwargs.total_steps=90")
    resumed = run_main(capsys, "train", path, "--resume", "--force", "training.num_epochs=3", *new)
    assert resumed.returncode == 0, resumed.stderr
    fresh = tmp_path / "fresh"
    run_main(capsys, "train", path, f"training.path={fresh}", "training.num_epochs=3", *new)

    def state(run):
        return torch.load(run / "checkpoints" / "last.pt", weights_only=True)

    after, alone = state(tmp_path / "run"), state(fresh)
    if "Plateau" in schedule:  # cut by the metric: the checkpoint's cut, on the new rate
        assert after["history"][2]["lr"] == pytest.approx(0.0005 * cut, rel=1e-12)
    else:
        assert after["history"][2]["lr"] == pytest.approx(alone["history"][2]["lr"], rel=1e-12)
        assert after["optimizer"]["param_groups"][0]["lr"] == pytest.approx(
            alone["optimizer"]["param_groups"][0]["lr"], rel=1e-12
        )
    assert after["history"][1]["lr"] != after["history"][2]["lr"]
    assert after["optimizer"]["param_groups"][0]["weight_decay"] == 0.1


@pytest.mark.parametrize(
    "schedule",
    [
        "training.lr_scheduler={type: torch.optim.lr_scheduler.CosineAnnealingLR}",
        "training.lr_scheduler={type: torch.optim.lr_scheduler.OneCycleLR, interval: step, "
        "kwargs: {max_lr: 0.01}}",
    ],
    ids=["cosine", "per-step"],
)
def test_a_run_resumed_for_longer_stretches_a_schedule_that_lasts_the_run(
    schedule, make_config, tmp_path, capsys
):
    """A schedule whose length is left out lasts the run: resumed with more epochs, its next
    epochs have the rates of a run that long from its start (the saved length brought the
    cosine back up, and ran a one-cycle schedule past its end: a traceback)."""
    cfg = make_config(schedule, "training.num_epochs=2")
    path = write_config(cfg, tmp_path / "c.yaml")
    assert run_main(capsys, "train", path).returncode == 0
    resumed = run_main(capsys, "train", path, "--resume", "training.num_epochs=4")
    assert resumed.returncode == 0, resumed.stderr
    fresh = tmp_path / "fresh"
    run_main(capsys, "train", path, f"training.path={fresh}", "training.num_epochs=4")
    after, alone = (
        torch.load(run / "checkpoints" / "last.pt", weights_only=True)["history"]
        for run in (tmp_path / "run", fresh)
    )
    for epoch in (2, 3):
        assert after[epoch]["lr"] == pytest.approx(alone[epoch]["lr"], rel=1e-12), epoch
