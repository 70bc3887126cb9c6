"""Config loading: the shipped configs, overrides, and an error naming the key for every mistake."""

from pathlib import Path

import pytest
import yaml
from conftest import assert_refused, run_main

import QuantumGravPy as qg
from QuantumGravPy.config import config_from_dict, config_to_dict, dump_config

CONFIGS = Path(__file__).parent.parent / "configs"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "name", ["train.yaml", "train_ddp.yaml", "multitask.yaml", "generate.yaml"]
)
def test_shipped_configs_load(name):
    """Every setting the file writes is the loaded config's (none lost to a default)."""
    cfg = qg.load_config(CONFIGS / name)
    written = yaml.safe_load((CONFIGS / name).read_text())
    loaded = config_to_dict(cfg)

    def check(raw, have, where):
        if isinstance(raw, dict):
            for key, value in raw.items():
                check(value, have[key], f"{where}.{key}")
        elif isinstance(raw, list):
            assert len(have) == len(raw), where
            for i, (value, got) in enumerate(zip(raw, have, strict=True)):
                check(value, got, f"{where}[{i}]")
        else:
            assert have == raw, where

    check(written, loaded, name)
    assert cfg.early_stopping.enabled and cfg.training.lr_scheduler is not None


def test_an_empty_mapping_is_every_default_and_an_empty_file_is_refused(tmp_path):
    cfg = qg.load_config(write(tmp_path, "{}  # every default\n"))
    assert cfg == config_from_dict({})
    assert cfg.training.batch_size == 32 and cfg.data.dimensions == (2, 3, 4)
    assert str(cfg.run_dir) == "runs/qg"
    with pytest.raises(
        qg.ConfigError,
        match=r"the file is empty, which would train every "
        r"default \(3000 generated causal sets, 30 epochs.*or \{\} to train",
    ):
        qg.load_config(write(tmp_path, "# nothing but a comment\n"))
    # with overrides, an empty file is a deliberate start from the defaults
    assert qg.load_config(write(tmp_path, ""), ["name=x"]).name == "x"


def test_overrides_are_parsed_as_yaml_and_may_create_sections(tmp_path):
    cfg = qg.load_config(
        write(tmp_path, "training: {num_epochs: 3}\n"),
        [
            "training.num_epochs=7",
            "training.optimizer.kwargs={lr: 0.01}",
            "data.num_points=[10, 20]",
            "training.lr_scheduler.type=torch.optim.lr_scheduler.StepLR",
            "training.lr_scheduler.kwargs.step_size=2",
            "name=with=equals",
        ],
    )
    assert cfg.training.num_epochs == 7
    assert cfg.training.optimizer.kwargs == {"lr": 0.01}
    assert cfg.data.num_points == (10, 20)
    assert cfg.training.lr_scheduler.kwargs == {"step_size": 2}
    assert cfg.name == "with=equals"


def test_early_stopping_takes_one_metric_or_a_list(tmp_path):
    one = qg.load_config(write(tmp_path, "early_stopping: {metric: train_loss}"))
    assert one.early_stopping.metric == "train_loss" and one.early_stopping.metrics == (
        "train_loss",
    )
    text = "early_stopping: {metric: [val_loss, val_accuracy], combine: all}"
    several = qg.load_config(write(tmp_path, text))
    assert several.early_stopping.metrics == ("val_loss", "val_accuracy")
    assert several.early_stopping.combine == "all"


def test_dumped_config_loads_back_equal(tmp_path):
    cfg = qg.load_config(CONFIGS / "train.yaml", ["model.dropout=0.25"])
    assert qg.load_config(write(tmp_path, dump_config(cfg))) == cfg


@pytest.mark.parametrize(
    "text, overrides, expected",
    [
        ("trainig: {}", [], "trainig: unknown key"),
        ("training: {batchsize: 3}", [], "did you mean training.batch_size"),
        (
            "training: {batch_size: 0}",
            [],
            "training.batch_size: expected a positive number, found 0",
        ),
        ("training: {batch_size: '8'}", [], "training.batch_size: expected an integer, found '8'"),
        ("training: {num_epochs: 2.5}", [], "training.num_epochs: expected an integer"),
        ("training: {drop_last: 'yes'}", [], "training.drop_last: expected true or false"),
        ("training: {device: gpu}", [], "training.device: expected auto, cpu, cuda or cuda:N"),
        ("training: []", [], "training: expected a section"),
        (
            "training: {optimizer: {type: torch.optim.Adamm}}",
            [],
            "training.optimizer.type: cannot import",
        ),
        ("criterion: nosuchmodule.Loss", [], "criterion: cannot import 'nosuchmodule.Loss'"),
        ("criterion: torch.nn", [], "criterion: 'torch.nn' is not a class or function"),
        ("model: {conv: 'torch_geometric nn'}", [], "model.conv: expected a dotted import path"),
        ("model: {dropout: 1.5}", [], "model.dropout: expected a number in [0, 1)"),
        ("model: {norm: group}", [], "model.norm: expected one of graph, layer, batch, none"),
        ("model: {pooling: [mean, sum]}", [], "model.pooling[1]: expected one of mean, max, add"),
        ("data: {split: [0.5, 0.5, 0.5]}", [], "data.split: expected three fractions"),
        ("data: {split: [0.5, 0.5]}", [], "data.split: expected a list of 3 items"),
        ("data: {num_points: [64, 32]}", [], "data.num_points: expected [min, max]"),
        ("data: {dimensions: [2, 9]}", [], "data.dimensions: expected dimensions from 2 to 6"),
        (
            "early_stopping: {metric: val_accuracy}",
            [],
            "early_stopping.mode: val_accuracy improves towards max",
        ),
        (
            "early_stopping: {metric: f1}",
            [],
            "early_stopping.metric: 'f1' is not a column of this config's history.csv (choose "
            "from val_loss, val_y_accuracy, val_y_f1_macro, val_accuracy, val_f1_macro, "
            "train_loss, train_y_accuracy, train_accuracy)",
        ),
        (
            "early_stopping: {metric: [val_loss, val_f1]}",
            [],
            "early_stopping.metric: 'val_f1' is not a column of this config's history.csv",
        ),
        (
            "early_stopping: {metric: []}",
            [],
            "early_stopping.metric: expected a column name or a list of different ones, found []",
        ),
        (
            "early_stopping: {metric: [val_loss, val_loss]}",
            [],
            "expected a column name or a list of different ones, found ['val_loss', 'val_loss']",
        ),
        (
            "early_stopping: {metric: [val_accuracy, val_loss]}",
            [],
            "early_stopping.mode: val_accuracy improves towards max",
        ),
        ("early_stopping: {metric: 3}", [], "early_stopping.metric: expected a string, found 3"),
        ("early_stopping: {combine: both}", [], "early_stopping.combine: expected one of any, all"),
        ("log_level: LOUD", [], "log_level: expected one of"),
        ("training: {sampler: balanced}", [], "training.sampler: expected null, class_balanced"),
        ("training: {sampler: nowhere.Sampler}", [], "training.sampler: cannot import"),
        ("", ["training.batch_size"], "override 'training.batch_size': expected key.path=value"),
        ("", ["training.batch_size=[1"], "override 'training.batch_size=[1': the value is not"),
        ("", ["training.nope=1"], "override 'training.nope=1': training.nope: unknown key"),
        ("name: x", ["name.sub=1"], "override 'name.sub=1': name.sub: name is str 'x', not a"),
        ("", ["name.sub=1"], "override 'name.sub=1': name: expected a string"),
        (  # the error names another key: the override after which the config fails is blamed
            "",
            ["training.num_epochs=2", "early_stopping.metric=val_accuracy"],
            "override 'early_stopping.metric=val_accuracy': early_stopping.mode: val_accuracy",
        ),
        ("- a\n- b\n", [], "expected a mapping of keys at the top level"),
        ("a: [1\n", [], "invalid YAML"),
        ("x: !!python/object/apply:os.system [echo hi]\n", [], "YAML tags are not allowed"),
    ],
)
def test_every_mistake_names_its_key(tmp_path, text, overrides, expected):
    path = write(tmp_path, text)
    with pytest.raises(qg.ConfigError) as info:
        qg.load_config(path, overrides)
    message = str(info.value)
    assert expected in message and "\n" not in message
    # the file is blamed for its own mistakes, an override for its: never both
    assert (str(path) in message) != bool(overrides), message


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(qg.ConfigError, match="config file not found: .*nope.yaml"):
        qg.load_config(tmp_path / "nope.yaml")


def test_config_is_frozen():
    cfg = config_from_dict({})
    with pytest.raises(AttributeError):
        cfg.training.batch_size = 3


# --- hostile files: each refused in one line, quickly, before anything is built -----------------


def hostile_config(tmp_path, body: str) -> Path:
    """A config whose data.dataset is a function beside it taking any keyword (so nothing but
    the file's own shape can refuse it), with ``body`` under data.dataset_kwargs."""
    (tmp_path / "any_graphs.py").write_text(
        "def graphs(**kwargs):\n    from user_data import ring_graphs\n    return ring_graphs()\n"
    )
    head = (
        f"training: {{path: {tmp_path / 'run'}, device: cpu, num_epochs: 1}}\n"
        "data:\n  dataset: any_graphs.graphs\n  dataset_kwargs:\n"
    )
    return write(tmp_path, head + body)


@pytest.mark.timeout(60)
def test_a_config_nested_330_levels_is_refused_naming_where(tmp_path, capsys):
    depth = 330
    flow = hostile_config(tmp_path, "    deep: " + "{a: " * depth + "1" + "}" * depth + "\n")
    line = assert_refused(run_main(capsys, "train", flow), str(flow), "more than 64 levels")
    assert "under data.dataset_kwargs.deep.a.a" in line and "line 5" in line
    block = "".join(f"    {'  ' * i}k:\n" for i in range(depth)).rstrip(":\n") + ": 1\n"
    assert_refused(run_main(capsys, "train", hostile_config(tmp_path, block)), "64 levels")
    assert not (tmp_path / "run").exists()
    # an override nests as deep through its key or its value
    for override in ("data.dataset_kwargs." + ".".join(["a"] * depth) + "=1",
                     "data.dataset_kwargs.x=" + "[" * depth + "]" * depth):  # fmt: skip
        with pytest.raises(qg.ConfigError, match="override .*: nested more than 64 levels"):
            qg.load_config(CONFIGS / "train.yaml", [override])


@pytest.mark.timeout(60)
def test_a_billion_laughs_in_dataset_kwargs_is_refused_unexpanded(tmp_path, capsys):
    """Nine aliases of nine aliases, nine levels: 9^9 strings if expanded, 600 bytes as
    written; and an alias inside its own anchor, which would never end."""
    lines = ['    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"    {name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = hostile_config(tmp_path, "\n".join(lines) + "\n")
    line = assert_refused(run_main(capsys, "train", bomb), str(bomb), "100,000 values")
    assert "under data.dataset_kwargs." in line
    looped = hostile_config(tmp_path, "    a: &a [1, *a]\n")
    assert_refused(run_main(capsys, "train", looped), "*a (line 5) lies inside its own anchor")
    assert not (tmp_path / "run").exists()
    # anchors that repeat a few settings, as people write them, still load
    reused = write(tmp_path, "data: {dataset_kwargs: {a: &k {b: [1, 2]}, c: *k}}\n")
    assert qg.load_config(reused).data.dataset_kwargs == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}}


@pytest.mark.timeout(60)
def test_a_6_mb_config_is_refused_before_it_is_parsed(tmp_path, capsys):
    values = ", ".join(f"{i:9d}" for i in range(6 * 2**20 // 11))
    big = hostile_config(tmp_path, f"    values: [{values}]\n")
    assert big.stat().st_size > 6 * 10**6
    assert_refused(run_main(capsys, "train", big), str(big), "larger than 1 MiB")
    assert not (tmp_path / "run").exists()
