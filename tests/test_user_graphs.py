"""A user's own graphs (``data.dataset``, or graphs given from Python) checked as files are:
an index out of its graph, mixed feature widths, NaN features or targets, a pair target of the
wrong length are each one line naming the function, the graph and the attribute, before a step
is taken or a metric written. summary.json is valid JSON whatever the metrics, and a NaN
validation metric is said once."""

import json

import pytest
import torch
from bad_graphs import nan_features
from conftest import assert_refused, run_main

import QuantumGravPy as qg
from QuantumGravPy.config import dump_config
from QuantumGravPy.runs import layout

pytestmark = pytest.mark.timeout(120)

BAD = "data.dataset=bad_graphs.bad_edge"
EDGE_TASK = "tasks=[{name: flow, type: regression, level: edge, pairs: %s}]"


@pytest.mark.parametrize(
    "overrides, graph, attribute, node",
    [
        ([BAD], 7, "edge_index", 7),  # n: the first node of the next graph in a batch
        ([BAD, "data.dataset_kwargs={node: n+5}"], 7, "edge_index", 12),
        ([BAD, "data.dataset_kwargs={node: '-1'}"], 7, "edge_index", -1),
        # the last graph: past every node of any batch it is in (a traceback before)
        ([BAD, "data.dataset_kwargs={node: n+5, graph: 39}"], 39, "edge_index", 14),
        (  # held in PyG's joined tensors: checked there, without a graph object each
            ["data.dataset=bad_graphs.bad_edge_in_memory", "data.dataset_kwargs={node: '-1'}"],
            7, "edge_index", -1,
        ),
        (  # an edge task's own pairs, read from the same graphs
            [BAD, "data.dataset_kwargs={attribute: bond_index}", EDGE_TASK % "bond_index",
             "early_stopping.metric=val_loss"],
            7, "bond_index", 7,
        ),
    ],
)  # fmt: skip
def test_an_index_out_of_its_graph_is_one_line(
    config_file, capsys, tmp_path, overrides, graph, attribute, node
):
    result = run_main(capsys, "train", config_file(), *overrides)
    function = overrides[0].partition("=")[2]
    line = assert_refused(
        result,
        f"data.dataset ({function})",
        f"graph {graph}: '{attribute}' names node {node}, but the graph has",
    )
    assert "another graph's node" in line
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data.dataset=bad_graphs.mixed_widths"],
            "data.dataset (bad_graphs.mixed_widths): graph 5: 'x' has shape [5, 4] where graph "
            "0's is [*, 3]: every graph needs the same width",
        ),
        (  # a node-level regression target
            ["data.dataset=bad_graphs.nan_heat", "early_stopping.metric=val_loss",
             "tasks=[{name: heat, type: regression, level: node}]"],
            "data.dataset (bad_graphs.nan_heat): graph 4: 'heat' holds NaN or infinite values",
        ),
        (  # an edge target one row short of its pairs
            ["data.dataset=bad_graphs.short_flow", EDGE_TASK % "edge_index",
             "early_stopping.metric=val_loss"],
            "data.dataset (bad_graphs.short_flow): graph 6: 'flow' needs one row per pair of "
            "'edge_index' (12 in this graph), found 11 rows",
        ),
    ],
)  # fmt: skip
def test_mixed_widths_nan_targets_and_short_pair_targets_are_one_line(
    config_file, capsys, overrides, message
):
    assert_refused(run_main(capsys, "train", config_file(), *overrides), message)


def test_nan_features_in_test_graphs_alone_are_refused_before_any_metric(
    config_file, capsys, tmp_path
):
    """Before, the run ended with exit 0, an accuracy counting the NaN predictions and a
    summary.json holding a bare NaN."""
    cfg = config_file()
    config = qg.load_config(cfg)
    _, _, test = qg.split_dataset(list(range(40)), config.data.split, config.data.seed)
    chosen = list(test.indices)[:2]
    kwargs = f"data.dataset_kwargs={{graphs_with_nan: {chosen}}}"
    result = run_main(capsys, "train", cfg, "data.dataset=bad_graphs.nan_features", kwargs)
    assert_refused(result, f"graph {min(chosen)}: 'x' holds NaN or infinite values")
    assert not (tmp_path / "run" / layout.SUMMARY).exists()


def test_graphs_given_from_python_are_checked_too(make_config):
    config = make_config("data.dataset=user_data.ring_graphs")
    with pytest.raises(qg.DataError, match="the dataset given: graph 3: 'x' holds NaN"):
        qg.Trainer(config, nan_features([3]))
    trainer = qg.Trainer(config, nan_features([]))
    try:  # a second dataset for the same model is checked as it is split
        with pytest.raises(qg.DataError, match="the dataset given: graph 9: 'x' holds NaN"):
            trainer.prepare_dataloaders(nan_features([9]))
    finally:
        trainer.close()


def test_graphs_are_checked_chunk_by_chunk_and_named_by_their_place(monkeypatch):
    """The check reads graphs in chunks (a few tensor operations each, not a few per graph):
    graphs of 1,024-2,048 nodes over several chunks pass, and a bad index in the last graph of
    the last chunk is named by its place in the whole dataset."""
    from torch_geometric.data import Data

    from QuantumGravPy.data.sources import checks

    monkeypatch.setattr(checks, "CHUNK", 64)
    g = torch.Generator().manual_seed(0)
    graphs = []
    for i in range(200):
        n = 1024 + 5 * i
        edges = torch.randint(0, n, (2, 2 * n), generator=g)
        graphs.append(Data(x=torch.ones(n, 2), edge_index=edges, y=torch.tensor([0])))
    checks.check_graphs(graphs, checks.GraphChecks(), source="big")
    graphs[-1].edge_index[0, -1] = graphs[-1].num_nodes
    with pytest.raises(qg.DataError, match="big: graph 199: 'edge_index' names node 2019,"):
        checks.check_graphs(graphs, checks.GraphChecks(), source="big")


def test_summary_json_is_json_whatever_the_metrics(tmp_path):
    layout.write_summary(tmp_path, {"test_loss": float("nan"), "m": [1.0, float("inf")]})
    text = (tmp_path / layout.SUMMARY).read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"test_loss": None, "m": [1.0, None]}


def test_a_nan_validation_metric_is_said_once_naming_it(make_config, tmp_path, capsys):
    """A model that gives NaN in evaluation (the data are clean): validation is NaN every epoch
    and no best.pt is written; a warning says so once, naming the metric, and summary.json
    stays JSON."""
    cfg = make_config(
        "data.dataset=user_data.ring_graphs",
        "model={type: user_noise.NaNInEval}",
        "tasks=[{name: shape, type: regression, target: y}]",
        "early_stopping.metric=val_loss",
        "training.num_epochs=3",
    )
    config = tmp_path / "nan.yaml"
    config.write_text(dump_config(cfg))
    result = run_main(capsys, "train", config)
    warned = [line for line in result.stderr.splitlines() if "NaN at epoch" in line]
    assert len(warned) == 1, result.stderr
    assert "val_loss" in warned[0] and "early_stopping.metric" in warned[0]
    assert "no best.pt" in warned[0]
    summary = json.loads((cfg.run_dir / layout.SUMMARY).read_text())
    assert summary["test_loss"] is None


def test_a_nan_target_in_a_file_of_saved_graphs_is_one_line(tmp_path, capsys):
    """Files of arrays were checked for NaN; a file of saved PyG graphs is read as saved, and
    a NaN regression target in it trained with NaN validation every epoch."""
    from torch_geometric.data import Data

    graphs = [
        Data(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
             mass=torch.tensor([float(i)]))
        for i in range(20)
    ]  # fmt: skip
    graphs[3].mass = torch.tensor([float("nan")])
    torch.save(graphs, tmp_path / "saved.pt")
    config = tmp_path / "config.yaml"
    config.write_text(
        dump_config(
            qg.config.config_from_dict(
                {
                    "log_level": "WARNING",
                    "data": {"files": [str(tmp_path / "saved.pt")], "root": str(tmp_path / "c")},
                    "tasks": [{"name": "mass", "type": "regression"}],
                    "early_stopping": {"metric": "val_loss"},
                    "training": {"path": str(tmp_path / "run"), "num_epochs": 1, "device": "cpu"},
                }
            )
        )
    )
    assert_refused(
        run_main(capsys, "train", config), "saved.pt: graph 3: 'mass' holds NaN or infinite values"
    )
