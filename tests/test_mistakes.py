"""Mistakes a new user makes, each answered in one line that says what to change, before
anything is written; and what a run that crashed leaves behind."""

import json
import math
import os

import pytest
import torch
import yaml
from conftest import ROOT, assert_refused, run_forked, run_main, train

import QuantumGravPy as qg
from QuantumGravPy.config import config_from_dict
from QuantumGravPy.data.sources.writing import write_embedded

# --- a model that cannot run on the data ---------------------------------------------------


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (
            ["model.conv_kwargs={aggr: foo}"],
            ["model.conv_kwargs: torch_geometric.nn.GraphConv(8, 8, aggr='foo'", "'foo'"],
        ),
        (
            ["model.conv=torch.nn.Linear"],
            ["model.conv: torch.nn.Linear is not a message-passing layer", "(x, edge_index)"],
        ),
        (
            ["model.activation=torch.nn.Linear"],
            ["model.activation: torch.nn.Linear() cannot be built", "torch.nn.ReLU"],
        ),
        (
            ["model.conv=torch_geometric.nn.GATConv", "model.conv_kwargs={heads: 2}"],
            ["model.conv_kwargs: GATConv with heads: 2", "16 features", "add concat: false"],
        ),
        (  # builds, then fails inside the layer's forward: the traceback names the conv
            ["model.conv=torch_geometric.nn.GINEConv"],
            ["model.conv: torch_geometric.nn.GINEConv fails on a batch of the first training"],
        ),
    ],
)
def test_a_model_that_cannot_run_is_one_line_before_anything_is_written(
    config_file, tmp_path, capsys, overrides, fragments
):
    assert_refused(run_main(capsys, "train", config_file(), *overrides), *fragments)
    assert not (tmp_path / "run").exists()


# --- what is not a mistake in the config: reported as what it is --------------------------------


def failed(result) -> str:
    """What the command line promises for a failure that is not a mistake in what was passed:
    exit status 1 (not 2) and one line on stderr, starting with ``error:``; no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_bug_in_the_users_code_or_memory_running_out_is_reported_as_what_it_is(
    config_file, tmp_path, capsys
):
    """In the model's first forward pass and in a data.reader: what happened and the line of
    the user's code it came from, never a config key or an unreadable file; --debug shows the
    original traceback; nothing is written."""
    cfg = config_file()
    # a bug in the user's model (a shape error inside torch, called from its forward)
    line = failed(run_main(capsys, "train", cfg, "model={type: user_models.FailsOnEveryBatch}"))
    assert "error: RuntimeError: mat1 and mat2 shapes cannot be multiplied" in line
    assert "(user_models.py:" in line and "in FailsOnEveryBatch.forward)" in line
    assert "in the model's first forward pass" in line and "model.type" not in line
    # the same in the ranks of a job: one line too, naming a rank
    ranks = ("model={type: user_models.FailsOnEveryBatch}", "parallel.world_size=2")
    line = failed(run_main(capsys, "train", cfg, *ranks))
    assert line.startswith("error: rank ") and "in FailsOnEveryBatch.forward)" in line, line
    # memory running out inside the built-in model's conv: not blamed on model.conv
    oom = ("model.conv=user_models.OutOfMemoryConv",)
    line = failed(run_main(capsys, "train", cfg, *oom))
    assert line.startswith("error: out of memory in the model's first forward pass"), line
    assert "CUDA out of memory. Tried to allocate 20.00 GiB" in line and "model.conv" not in line
    debug = run_main(capsys, "train", cfg, *oom, "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert 'user_models.py", line' in debug.stderr and "in forward" in debug.stderr
    assert "raise torch.OutOfMemoryError" in debug.stderr  # the user's frame
    assert not (tmp_path / "run").exists()
    # a bug in the user's data.reader, sample 2 of a real file: not "cannot be read"
    source = config_from_dict({"data": {"root": str(tmp_path / "gen"), "num_graphs": 6,
                                        "num_points": [16, 24]}})  # fmt: skip
    store = write_embedded(source.data, tmp_path / "sets.h5")
    data = {"files": [str(store)], "reader": "user_data.breaks_on_sample_2",
            "root": str(tmp_path / "cache")}  # fmt: skip
    reading = config_file(data=data)
    line = failed(run_main(capsys, "train", reading))
    assert line.startswith("error: KeyError: 'b' (user_data.py:"), line
    assert f"in breaks_on_sample_2) in data.reader user_data.breaks_on_sample_2('{store}', 2)" in (
        line
    )
    assert "cannot be read" not in line
    debug = run_main(capsys, "train", reading, "--debug")
    assert 'user_data.py", line' in debug.stderr and "in breaks_on_sample_2" in debug.stderr


def test_attention_heads_averaged_train(config_file, tmp_path, capsys):
    overrides = [
        "model.conv=torch_geometric.nn.GATConv",
        "model.conv_kwargs={heads: 2, concat: false}",
    ]
    result = run_main(capsys, "train", config_file(), "training.num_epochs=1", *overrides)
    assert result.returncode == 0, result.stderr


# --- a crashed run ----------------------------------------------------------------------------


def test_a_crashed_run_says_why_in_its_log_and_a_plain_retry_starts_again(
    config_file, tmp_path, capsys
):
    cfg, run = config_file(), tmp_path / "run"
    with pytest.raises(RuntimeError, match="broke in the training pass"):
        run_main(capsys, "train", cfg, "model={type: user_models.BreaksWhenTraining}")
    log = (run / "train.log").read_text()
    assert "stopped by an error during epoch 1: RuntimeError: broke in the training pass" in log
    assert "Traceback" in log  # not a user's mistake: where it happened, for a bug report
    assert qg.runs.layout.results(run) == []  # nothing of value: a plain retry may start
    retry = run_main(capsys, "train", cfg)
    assert retry.returncode == 0, retry.stderr
    assert "broke in the training pass" in (run / "train.log").read_text()  # kept, appended to
    assert "test_loss" in (run / "summary.json").read_text()
    # a finished run is never replaced by a plain start; the refusal names every way on
    again = run_main(capsys, "train", cfg)
    assert_refused(again, "already holds a run", "--resume", "--overwrite", "training.path")


def test_from_python_refusals_name_the_keyword_arguments(config_file, tmp_path, capsys):
    cfg = config_file()
    assert run_main(capsys, "train", cfg).returncode == 0
    config = qg.load_config(cfg)
    with pytest.raises(qg.RunDirectoryError) as refused:
        train(config)
    assert "resume=True" in str(refused.value) and "overwrite=True" in str(refused.value)
    assert "--" not in str(refused.value)
    with pytest.raises(qg.RunDirectoryError, match="resume=True.*overwrite=True"):
        qg.launch(config, world_size=2)  # refused before any process starts
    changed = qg.load_config(cfg, ["model.dropout=0.1"])
    with pytest.raises(qg.ConfigError, match=r"model.dropout.*pass force=True") as info:
        qg.Trainer(changed, resume=True)
    assert "--" not in str(info.value)
    with pytest.raises(qg.ConfigError, match="overwrite=True and resume=True exclude each other"):
        qg.Trainer(config, overwrite=True, resume=True)


# --- checkpoints --------------------------------------------------------------------------------


def test_a_checkpoint_that_does_not_fit_names_the_settings_and_tensors(
    config_file, tmp_path, capsys
):
    cfg = config_file()
    assert run_main(capsys, "train", cfg).returncode == 0
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    tested = run_main(capsys, "test", cfg, "--checkpoint", best, "model.hidden_channels=12")
    assert_refused(
        tested,
        "does not fit the configured model",
        "trained with model.hidden_channels 8 (the config says 12)",
        "encoder.weight [8, ",
    )
    resumed = run_main(
        capsys, "train", cfg, "--resume", "--force", "model.hidden_channels=12",
        "training.num_epochs=3",
    )  # fmt: skip
    assert_refused(resumed, "last.pt: does not fit", "model.hidden_channels 8", "encoder.weight")
    assert len(qg.runs.layout.read_history(tmp_path / "run")) == 2  # the run is untouched
    # weights that fit a model that computes otherwise: tested, with a word of warning
    gelu = run_main(capsys, "test", cfg, "--checkpoint", best, "model.activation=torch.nn.GELU")
    assert gelu.returncode == 0, gelu.stderr
    assert (
        "best.pt: it was trained with model.activation 'torch.nn.ReLU' (the config says "
        "'torch.nn.GELU'); its results may differ from those of its run" in gelu.stderr
    )


def test_what_is_not_a_checkpoint_is_named_for_what_it_is(config_file, tmp_path, capsys):
    cfg = config_file()

    class Runs:  # pickled by reference: loading it would import and call code
        def __reduce__(self):
            return (print, ("this ran",))

    pickle = tmp_path / "code.pt"
    torch.save({"model": {}, "epoch": 1, "hook": Runs()}, pickle)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "best.pt").write_bytes(b"")
    cases = [
        (cfg, ["not a checkpoint (it is a text file, starting 'data:"]),
        (pickle, ["refused", "Python objects such as print", "can run code"]),
        (tmp_path / "run", ["is a directory, not a checkpoint file", "checkpoints/best.pt?"]),
        (tmp_path / "run" / "checkpoints" / "best.pt", ["not a checkpoint (the file is empty)"]),
    ]
    for path, fragments in cases:
        line = assert_refused(run_main(capsys, "test", cfg, "--checkpoint", path), *fragments)
        assert "weights_only" not in line and "\x1b" not in line, line
    assert "this ran" not in capsys.readouterr().out


# --- the config -----------------------------------------------------------------------------


def test_an_override_mistake_is_blamed_on_the_override(config_file, capsys):
    cfg = config_file()
    for override, fragment in [
        ("trainig.num_epochs=3", "trainig: unknown key"),
        ("training.num_epochs=abc", "expected an integer, found 'abc'"),
        ("model.dropout=1.5", "model.dropout: expected a number in [0, 1)"),
    ]:
        line = assert_refused(run_main(capsys, "train", cfg, override), f"override {override!r}")
        assert fragment in line and cfg not in line
    # the file's own mistake is still the file's
    with open(cfg) as f:
        raw = yaml.safe_load(f)
    raw["trainig"] = {}
    with open(cfg, "w") as f:
        yaml.safe_dump(raw, f)
    assert_refused(run_main(capsys, "train", cfg, "training.num_epochs=3"), f"{cfg}: trainig")


def test_an_empty_config_file_is_refused_with_what_it_would_do(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# to do\n")
    assert_refused(run_main(capsys, "train", empty), "the file is empty", "3000", "{}")
    assert not (tmp_path / "runs").exists()


def test_a_failed_job_ends_on_its_error_line_and_its_log_says_why(config_file, tmp_path):
    """Nothing after the error (multiprocessing's leak warning came after it, from the bar
    lock of the rank that was stopped), and rank 0's log, whose rank was stopped from
    outside, says which rank failed. On the way: two processes on one core, each with less
    than a batch of graphs, are warned about before training starts."""
    result = run_forked(
        "train", config_file(), "parallel.world_size=2", "model={type: user_models.FailsOnRankOne}",
        "training.batch_size=64",  # 56 training graphs: 28 per process
        cores={min(os.sched_getaffinity(0))},  # one core
    )  # fmt: skip
    assert result.returncode == 1
    assert "parallel.world_size: 2 processes share 1 CPU cores on this machine" in result.stderr
    assert (
        "each of the 2 processes gets 28 of the 56 training graphs, less than one batch of 64"
        in result.stderr
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: rank 1 failed: RuntimeError: rank 1 cannot train", result.stderr
    assert "leaked" not in result.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "the job stopped: rank 1 failed: RuntimeError: rank 1 cannot train" in log


# --- what trains, but not as the user meant ------------------------------------------------


def test_labels_counted_from_one_are_named_and_tasks_classes_maps_them(
    config_file, tmp_path, capsys
):
    import numpy as np

    cfg = config_file(data={"dataset": "user_data.rings_labelled_from_one"})
    plain = run_main(capsys, "train", cfg, "training.num_epochs=1")
    assert plain.returncode == 0, plain.stderr
    assert (
        "the labels 'y' of task 'y' run from 1 to 2, so class 0 never occurs and the model has 3 "
        "outputs; if they count from 1 (as QuantumGrav.jl's do), give the task with its "
        "classes, tasks: [{name: y, classes: [1, 2]}]" in plain.stderr
    )
    task = "tasks=[{name: kind, target: y, classes: [1, 2]}]"
    mapped = run_main(capsys, "train", cfg, task, "training.num_epochs=1", "--overwrite")
    assert mapped.returncode == 0, mapped.stderr
    assert "class 0 never occurs" not in mapped.stderr
    with np.load(tmp_path / "run" / "test_predictions.npz") as saved:
        assert saved["kind.predicted"].shape[1] == 2  # two classes, not three
        assert set(saved["kind.true"].tolist()) == {0, 1}  # labels 1 and 2 as classes 0 and 1
    wrong = "tasks=[{name: kind, target: y, classes: [1, 3]}]"
    refused = run_main(capsys, "train", cfg, wrong, "--overwrite")
    assert_refused(refused, "tasks[0].classes: task 'kind' has the label 2, which is not one of")
    assert (tmp_path / "run" / "summary.json").exists()  # refused before anything was replaced


def test_a_cosine_schedule_lasts_the_run_unless_its_length_is_given(make_config, capsys):
    from QuantumGravPy.training.loop.optim import build_scheduler

    cosine = "training.lr_scheduler={type: torch.optim.lr_scheduler.CosineAnnealingLR}"
    _, history, _ = train(make_config(cosine, "training.num_epochs=3", "log_level=INFO"))
    lr = history[0]["lr"]  # the optimizer's
    expected = [lr * (1 + math.cos(math.pi * e / 3)) / 2 for e in range(3)]
    assert [row["lr"] for row in history] == pytest.approx(expected, rel=1e-12)
    assert "T_max" not in capsys.readouterr().err
    given = make_config(
        "training.lr_scheduler={type: torch.optim.lr_scheduler.CosineAnnealingLR, "
        "kwargs: {T_max: 40}}",
        "training.num_epochs=1",
    )
    train(given, overwrite=True)
    assert (
        "training.lr_scheduler.kwargs.T_max is 40, but the run has 1 epochs "
        "(training.num_epochs): the run ends after 2% of the schedule; leave T_max out"
        in capsys.readouterr().err
    )
    # the shipped configs leave it out, so overriding the epochs shortens the schedule
    for name in ("train", "train_ddp", "multitask", "curvature_h"):
        config = qg.load_config(ROOT / "configs" / f"{name}.yaml", ["training.num_epochs=4"])
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        section = config.training.lr_scheduler
        assert (
            build_scheduler(section, optimizer, metric="val_loss", mode="min", num_epochs=4).T_max
            == 4
        )


def test_a_finished_run_says_the_command_that_goes_on_and_an_early_stopped_one_no_resume(
    config_file, tmp_path, capsys
):
    """Starting a run that ended again: one that trained all its epochs names --resume with
    more epochs (which trains them), one that early stopping ended does not (a resume would
    only test it again)."""
    cfg = config_file()
    assert run_main(capsys, "train", cfg, "training.num_epochs=1").returncode == 0
    again = run_main(capsys, "train", cfg, "training.num_epochs=1")
    assert_refused(again, "trained all its 1 epochs", "--resume with a larger training.num_epochs")
    longer = run_main(capsys, "train", cfg, "training.num_epochs=2", "--resume")
    assert longer.returncode == 0, longer.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs_run"] == 2
    # validation loss never improves by 100: early stopping ends the run after patience epochs
    stopping = ("training.num_epochs=6", "early_stopping.delta=100", "early_stopping.patience=1")
    other = f"training.path={tmp_path / 'early'}"
    assert run_main(capsys, "train", cfg, *stopping, other).returncode == 0
    assert json.loads((tmp_path / "early" / "summary.json").read_text())["stopped_early"]
    again = run_main(capsys, "train", cfg, *stopping, other)
    assert_refused(again, "early stopping ended after epoch 2", "--overwrite")
    assert "--resume" not in again.stderr
