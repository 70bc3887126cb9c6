"""Your own model class (``model.type``): trained, averaged, checkpointed, tested and run under
DDP like the built-in one, and one clear error for each way it can be wrong. (Its exact resume
after a kill is in test_resume.py.)"""

import json

import pytest
import torch
from conftest import assert_refused, run_main, run_ranks, train, write_config

import QuantumGravPy as qg

CUSTOM = ("model={type: user_models.SmallGCN}", "model.kwargs={hidden: 24}")


def test_a_custom_model_trains_averages_and_is_tested(make_config, tmp_path, capsys):
    cfg = make_config(*CUSTOM, "training.num_epochs=4", "training.ema_decay=0.5")
    trainer, history, metrics = train(cfg)
    assert type(trainer.model).__name__ == "SmallGCN"
    assert trainer.model.conv1.out_channels == 24  # model.kwargs reached the class
    assert trainer.model.heads["y"].out_features == 3  # one output per dimension class
    assert type(trainer.ema.module).__name__ == "SmallGCN"
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert metrics["test_accuracy"] >= 0.55  # three dimensions: chance is 1/3 (it reaches 0.78)

    # qg test rebuilds the class from the config and evaluates the best checkpoint
    result = run_main(
        capsys,
        "test",
        write_config(cfg, tmp_path / "custom.yaml"),
        "--checkpoint",
        cfg.run_dir / "checkpoints" / "best.pt",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((cfg.run_dir / "summary.json").read_text())
    assert json.loads(result.stdout)["test_accuracy"] == summary["test_accuracy"]


def test_a_model_returning_one_tensor_needs_no_dict(make_config):
    _, history, metrics = train(
        make_config(
            "model={type: user_models.MeanFeatures}",
            "training.num_epochs=6",
            "training.optimizer.kwargs={lr: 0.03}",
        )
    )
    # the mean features hold the ordering fraction, which tells the dimension: well above 1/3
    assert len(history) == 6 and metrics["test_accuracy"] >= 0.5
    assert history[-1]["val_accuracy"] >= 0.6


def train_custom(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return type(trainer.model).__name__, type(trainer.ddp_model).__name__, history


@pytest.mark.timeout(120)
def test_a_custom_model_trains_under_ddp(make_config):
    cfg = make_config(*CUSTOM, "training.num_epochs=2", "validation.mode=sharded")
    (model0, wrapper, history0), (model1, _, history1) = run_ranks(2, train_custom, cfg)
    assert model0 == model1 == "SmallGCN" and wrapper == "NoneType"  # released on close
    assert history0 == history1 and len(history0) == 2


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["model={type: user_models.OneColumnTooMany}"],
            "model.type: user_models.OneColumnTooMany returned shape [2, 4] for task 'y', "
            "expected [2, 3] (one row per graph, one column per output)",
        ),
        (
            ["model={type: user_models.WrongTaskName}"],
            "model.type: user_models.WrongTaskName returned no output for task 'y' "
            "(it returned 'dimension')",
        ),
        (
            ["model={type: user_models.NotAModel}"],
            "model.type: 'user_models.NotAModel' is not an nn.Module class",
        ),
        (
            ["model={type: user_models.SmallGCN}", "model.kwargs={width: 3}"],
            "model.kwargs: user_models.SmallGCN got an unexpected keyword argument 'width' (it "
            "takes hidden, dropout)",
        ),
        (["model.kwargs={hidden: 3}"], "model.kwargs: only for your own model.type"),
        (["model={type: user_models.nowhere}"], "model.type: cannot import 'user_models.nowhere'"),
    ],
)
def test_a_broken_custom_model_is_one_line_naming_it(
    make_config, tmp_path, capsys, overrides, message
):
    path = write_config(make_config("training.num_epochs=1"), tmp_path / "c.yaml")
    result = run_main(capsys, "train", path, *overrides)
    assert_refused(result, message)
    assert not (tmp_path / "run" / "history.csv").exists()  # it failed before any epoch ended


@pytest.mark.parametrize(
    "overrides, key, found",
    [
        # the file sets the built-in model's width (16): with a model of one's own it would do
        # nothing, so the first such key is named
        (["model.type=user_models.SmallGCN"], "model.hidden_channels", "16"),
        (
            ["model={type: user_models.SmallGCN}", "model.dropout=0.3"],
            "model.dropout",
            "0.3",
        ),
        (
            ["model={type: user_models.SmallGCN}", "model.pooling=[max]"],
            "model.pooling",
            "['max']",
        ),
    ],
)
def test_a_built_in_model_key_that_model_type_makes_meaningless_is_refused(
    make_config, tmp_path, capsys, overrides, key, found
):
    path = write_config(make_config("training.num_epochs=1"), tmp_path / "c.yaml")
    result = run_main(capsys, "train", path, *overrides)
    assert_refused(
        result, f"{key}: only for the built-in model, and would be ignored with model.type "
        f"user_models.SmallGCN (your own model.type is set up by model.kwargs; found {found})",
    )  # fmt: skip
    with pytest.raises(qg.ConfigError, match=key):  # from Python, as load_config reads it
        qg.load_config(path, overrides)
    # the whole section replaced: the model's own keys alone, which train
    fine = run_main(capsys, "train", path, "model={type: user_models.SmallGCN}")
    assert fine.returncode == 0, fine.stderr


COMPOSED = (
    "model={type: user_models.Composed, kwargs: {hidden: 16, "
    "conv: {class: torch_geometric.nn.GraphConv, kwargs: {in_channels: 16, out_channels: 16, "
    "aggr: mean}}, activation: {object: torch.nn.Tanh}}}"
)


def test_model_kwargs_build_the_objects_they_name(make_config, tmp_path, capsys):
    """{class: ..., kwargs: ...} is an instance, {object: ...} the object itself: built for
    the model from Python and from the command line, in every process; the config and the
    checkpoint keep the plain mappings, and qg test builds them again."""
    cfg = make_config(COMPOSED, "training.num_epochs=2")
    trainer, history, _ = train(cfg)
    model = trainer.model
    assert type(model.conv).__name__ == "GraphConv" and model.conv.aggr == "mean"
    assert type(model.act).__name__ == "Tanh"
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    saved = qg.load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")
    assert saved["config"]["model"]["kwargs"]["activation"] == {"object": "torch.nn.Tanh"}
    path = write_config(cfg, tmp_path / "composed.yaml")
    tested = run_main(capsys, "test", path, "--checkpoint", cfg.run_dir / "checkpoints/best.pt")
    assert tested.returncode == 0, tested.stderr
    both = run_main(capsys, "train", path, "parallel.world_size=2", "--overwrite")
    assert both.returncode == 0, both.stderr


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            "conv: {class: nowhere.Conv}, activation: {object: torch.nn.Tanh}",
            "model.kwargs.conv.class: cannot import 'nowhere.Conv'",
        ),
        (
            "conv: {class: torch_geometric.nn.GraphConv, kwargs: {in_channels: 16, "
            "out_channels: 16, width: 3}}, activation: {object: torch.nn.Tanh}",
            # GraphConv passes **kwargs on: its parent refuses the key as it is built
            "model.kwargs.conv: torch_geometric.nn.GraphConv(**kwargs) failed: TypeError: "
            "MessagePassing.__init__() got an unexpected keyword argument 'width'",
        ),
        (
            "conv: {class: torch_geometric.nn.GraphConv, args: [16, 16]}, "
            "activation: {object: torch.nn.Tanh}",
            "model.kwargs.conv: expected {class: dotted.path, kwargs: {...}} (an instance) or "
            "{object: dotted.path} (the object itself), found the keys args, class",
        ),
        (
            "conv: {class: torch_geometric.nn.GraphConv, kwargs: {in_channels: 16, "
            "out_channels: 16}}, activation: {object: torch.nn.Tanh, kwargs: {}}",
            "model.kwargs.activation: expected {class: dotted.path",
        ),
    ],
)
def test_an_object_model_kwargs_cannot_build_is_one_line_naming_its_key(
    make_config, tmp_path, capsys, kwargs, message
):
    path = write_config(make_config("training.num_epochs=1"), tmp_path / "c.yaml")
    override = f"model={{type: user_models.Composed, kwargs: {{{kwargs}}}}}"
    assert_refused(run_main(capsys, "train", path, override), message)
    # a YAML tag that would build the object is refused, whatever it names
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(path.read_text() + "\nextra: !!python/name:torch.nn.Tanh ''\n")
    assert_refused(run_main(capsys, "train", tagged), "YAML tags are not allowed")


def test_a_run_starts_from_another_runs_weights(make_config, tmp_path, capsys):
    """model.init_from: a run directory, or a state dict file, gives a new run its starting
    weights; with a learning rate of 0 the new run's model is the old run's best, to the bit.
    A model they do not fit is refused, naming the tensors, unless init_strict is false."""
    first = make_config("training.num_epochs=2", f"training.path={tmp_path / 'first'}")
    train(first)
    best = qg.load_checkpoint(first.run_dir / "checkpoints" / "best.pt")["model"]
    frozen = ("training.optimizer={type: torch.optim.SGD, kwargs: {lr: 0.0}}",
              "training.lr_scheduler=null", "training.num_epochs=1", "log_level=INFO")  # fmt: skip
    state_dict = tmp_path / "weights.pt"
    torch.save(best, state_dict)
    for i, source in enumerate((first.run_dir, state_dict)):
        path = write_config(make_config(*frozen, f"training.path={tmp_path / f'again{i}'}"),
                            tmp_path / f"again{i}.yaml")  # fmt: skip
        result = run_main(capsys, "train", path, f"model.init_from={source}")
        assert result.returncode == 0, result.stderr
        again = qg.load_checkpoint(tmp_path / f"again{i}" / "checkpoints" / "last.pt")["model"]
        assert again.keys() == best.keys()
        assert all(torch.equal(again[k], best[k]) for k in best), source
        log = (tmp_path / f"again{i}" / "train.log").read_text()
        assert f"model.init_from: {len(best)} of the model's {len(best)} tensors from" in log

    # resumed, a run continues from its own last.pt: the weights it started from may be gone
    state_dict.unlink()
    resumed = run_main(capsys, "train", path, f"model.init_from={state_dict}", "--resume",
                       "training.num_epochs=2")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr

    # two classes instead of three: the head's last layer does not fit
    other = write_config(make_config("data.dimensions=[2, 3]", "training.num_epochs=1", "log_level=INFO",
                                     f"training.path={tmp_path / 'other'}"),
                         tmp_path / "other.yaml")  # fmt: skip
    quiet = "log_level=WARNING"  # the refusals: one line
    refused = run_main(capsys, "train", other, f"model.init_from={first.run_dir}", quiet)
    assert_refused(
        refused, "model.init_from: ", "does not fit the model: tensor head.", "[3, 16] in the "
        "checkpoint, [2, 16] in the model", "set model.init_strict: false",
    )  # fmt: skip
    loose = run_main(capsys, "train", other, f"model.init_from={first.run_dir}",
                     "model.init_strict=false")  # fmt: skip
    assert loose.returncode == 0, loose.stderr
    log = (tmp_path / "other" / "train.log").read_text()
    assert f"of the model's {len(best)} tensors from" in log and "2 left as built" in log
    missing = run_main(capsys, "train", other, f"model.init_from={tmp_path / 'nowhere'}", quiet,
                       f"training.path={tmp_path / 'third'}")  # fmt: skip
    assert_refused(missing, "model.init_from: ", "nowhere does not exist")


PLAIN = (
    "model={type: QuantumGravPy.models.TensorInputs, kwargs: {module: {object: "
    "user_models.PlainGNN}, module_kwargs: {hidden_channels: 16, out_channels: 3}}}"
)


def test_a_model_taking_tensors_trains_through_the_adapter(make_config, tmp_path, capsys):
    """forward(x, edge_index, batch), as PyG's and the predecessor's models are written: built
    with the data's node features, trained on one and two processes, its two outputs named
    after two tasks; a wrong mapping or input is one line naming the key."""
    cfg = make_config(PLAIN, "training.num_epochs=3")
    trainer, history, metrics = train(cfg)
    assert type(trainer.model.module).__name__ == "PlainGNN"
    assert trainer.model.module.conv.in_channels == trainer.in_channels  # given by the adapter
    assert history[-1]["train_loss"] < history[0]["train_loss"] and metrics["test_accuracy"] > 0
    path = write_config(cfg, tmp_path / "plain.yaml")
    both = run_main(capsys, "train", path, "parallel.world_size=2", "--overwrite")
    assert both.returncode == 0, both.stderr

    two = (
        "model={type: QuantumGravPy.models.TensorInputs, kwargs: {module: {object: "
        "user_models.PlainTwoHeads}, module_kwargs: {hidden_channels: 16, out_channels: 3}, "
        "returns: {dim: 0, d: 1}}}",
        "tasks=[{name: dim, type: classification, target: y}, "
        "{name: d, type: regression, target: dimension}]",
    )
    cfg = make_config(*two, "training.num_epochs=2", f"training.path={tmp_path / 'two'}")
    _, history, metrics = train(cfg)
    assert {"test_dim_accuracy", "test_d_r2"} <= set(metrics)

    fresh = f"training.path={tmp_path / 'refused'}"
    path = write_config(make_config("training.num_epochs=1", fresh), tmp_path / "c.yaml")
    for override, message in (
        (two[0], "model.kwargs.returns: names the tasks ['d', 'dim'], but the config's are ['y']"),
        (PLAIN.replace("module_kwargs", "inputs: [x, edges], module_kwargs"),
         "model.kwargs.inputs: the batch has no attribute 'edges'"),
    ):  # fmt: skip
        assert_refused(run_main(capsys, "train", path, override), message)
