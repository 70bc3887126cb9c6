"""Edge-level tasks (``level: edge``): a target per pair of elements, read from n x n matrices
of causal-set files at each set's relations, or per edge of a PyG user's own graphs; trained,
validated the same on one process and two, and predicted with rows that name the set and its
two elements; every mistake one line."""

import csv

import numpy as np
import pytest
import torch
import zarr
from conftest import assert_refused, light_cone_order, run_main, run_ranks, train, train_on_rank
from torch_geometric.data import Batch, Data
from user_data import rings_with_edge_heat

import QuantumGravPy as qg
from QuantumGravPy.config import dump_config
from QuantumGravPy.physics import sprinkle
from QuantumGravPy.predict import read as read_predictions
from QuantumGravPy.predict.inputs import select_split

pytestmark = pytest.mark.timeout(240)

TASKS = (
    "tasks=[{name: is_link, type: binary, level: edge, pairs: relations_index},"
    " {name: interval, type: regression, level: edge, pairs: relations_index}]"
)


def write_sets(path, count=40, sizes=(12, 24), *, extra=None, labels=True):
    """2D sprinklings as QuantumGrav.jl writes them (a group per set, matrices column-major),
    each set's elements in a random order (not a natural labelling: the reader relabels them):
    the causal matrix, and with ``labels`` the link matrix ``is_link`` and ``interval``, each
    relation's number of elements strictly between its two. ``extra``: a sample whose
    ``interval`` also holds a value at a pair that is not a relation. Returns the path, each
    set's (relations, links, intervals) as the file numbers its elements, and the extra pair."""
    rng = np.random.default_rng(0)
    root = zarr.open_group(str(path), mode="w")
    truth, off = [], None
    for s in range(count):
        c = sprinkle(int(rng.integers(sizes[0], sizes[1] + 1)), 2, seed=s)
        order = rng.permutation(c.num_points)
        r, links = c.relations.numpy()[order][:, order], c.links.numpy()[order][:, order]
        interval = ((r.astype(np.int64) @ r.astype(np.int64)) * r).astype(np.float32)
        if extra == s:
            off = tuple(int(k) for k in np.argwhere(~r & ~r.T & ~np.eye(len(r), dtype=bool))[0])
            interval[off] = 1.0
        group = root.create_group(f"cset_{s + 1}")
        group.create_array("adjacency_matrix", data=r.T.astype(np.uint8).copy())
        if labels:
            group.create_array("is_link", data=links.T.astype(np.uint8).copy())
            group.create_array("interval", data=interval.T.copy())
        truth.append((r, links, interval))
    return path, truth, off


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    return write_sets(tmp_path_factory.mktemp("edges") / "sets.zarr")


def edge_config(make_config, path, *overrides):
    return make_config(
        f"data.files=[{path}]", "data.targets={is_link: is_link, interval: interval}",
        "data.pairs=relations", "data.transpose=true", TASKS, "early_stopping.metric=val_loss",
        *overrides,
    )  # fmt: skip


def test_edge_targets_train_from_the_command_line_and_predictions_name_the_elements(
    make_config, sets, tmp_path, capsys
):
    """Each relation of each set is a row: its link flag and interval size from the file's
    matrices, a prediction per row in qg predict's table, which names the set and the two
    elements as the file numbers them."""
    path, truth, _ = sets
    cfg = edge_config(make_config, path, "training.num_epochs=4")
    config = tmp_path / "edges.yaml"
    config.write_text(dump_config(cfg))
    result = run_main(capsys, "train", config)
    assert result.returncode == 0, result.stderr
    history = qg.runs.layout.read_history(cfg.run_dir)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    # as good as always answering "not a link" at least: the edge head learns from the pairs
    share_of_links = sum(lk.sum() for _, lk, _ in truth) / sum(r.sum() for r, _, _ in truth)
    assert history[-1]["val_is_link_accuracy"] > 1 - share_of_links

    output = tmp_path / "pairs.csv"
    predicted = run_main(capsys, "predict", cfg.run_dir, "--output", output)
    assert predicted.returncode == 0, predicted.stderr
    with open(tmp_path / "pairs_relations_index.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(int(r.sum()) for r, _, _ in truth)  # every relation, once
    for row in rows:
        r, links, interval = truth[int(row["index"])]
        i, j = int(row["element_from"]), int(row["element_to"])
        assert r[i, j]  # a relation: i precedes j in the file's own numbering
        assert int(row["is_link_true"]) == links[i, j]
        assert float(row["interval_true"]) == interval[i, j]
        assert 0.0 <= float(row["is_link_prob"]) <= 1.0

    # the same rows on two processes, and on new files without the pair targets
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    assert run_main(capsys, "predict", cfg.run_dir, "--output", one).returncode == 0
    assert (
        run_main(capsys, "predict", cfg.run_dir, "--output", two, "--world-size", 2).returncode == 0
    )
    a, b = read_predictions(one), read_predictions(two)
    assert set(a.edges["relations_index"]) == set(b.edges["relations_index"])
    for column, values in a.edges["relations_index"].items():
        assert np.array_equal(values, b.edges["relations_index"][column]), column
    new, new_truth, _ = write_sets(tmp_path / "new.zarr", count=5, labels=False)
    out = tmp_path / "new.npz"
    fresh = run_main(capsys, "predict", cfg.run_dir, "--files", new, "--output", out)
    assert fresh.returncode == 0, fresh.stderr
    rows = read_predictions(out).edges["relations_index"]
    assert "is_link_true" not in rows and len(rows["graph"]) == sum(
        r.sum() for r, _, _ in new_truth
    )
    with pytest.raises(qg.DataError, match="task 'is_link' is edge-level: its graphs need their "
                       "node pairs as 'relations_index'"):  # fmt: skip
        qg.predict(cfg.run_dir, [Data(x=torch.ones(5, 6), edge_index=torch.zeros(2, 0).long())])
    assert all(new_truth[g][0][i, j] for g, i, j in
               zip(rows["graph"], rows["element_from"], rows["element_to"], strict=True))  # fmt: skip


@pytest.mark.timeout(300)
def test_edge_metrics_are_the_same_on_one_and_two_processes(make_config, sets):
    """Metrics over pairs: sums over rows and torchmetrics' states, exact for any number of
    processes; two processes validating halves give the one-process numbers."""
    path, _, _ = sets
    cfg = edge_config(make_config, path, "training.num_epochs=2", "validation.mode=sharded")
    (history, weights), (other, _) = run_ranks(2, train_on_rank, cfg, timeout_s=120)
    assert history == other
    alone = qg.Trainer(cfg)
    alone.model.load_state_dict(weights)
    expected = alone.validator.evaluate(alone.model, alone.prepare_dataloaders()[1])
    # a graph's float32 forward pass in a batch of other graphs (the halves batch them
    # otherwise) rounds differently in the last bits, as matrix kernels block other row
    # counts otherwise; losses are float32 means over a batch's pairs: some 1e-7 relative,
    # far inside 1e-6
    assert expected == pytest.approx({k: history[-1][k] for k in expected}, rel=1e-6)
    assert "val_is_link_auroc" in expected and "val_interval_mse" in expected


def test_a_pyg_users_edge_targets_train_from_python(make_config):
    """A target per edge of the user's own graphs, paired by edge_index: each edge's value is
    its two nodes' first features summed, which the edge head learns."""
    cfg = make_config(
        "data.dataset=user_data.rings_with_edge_heat",
        "tasks=[{name: flow, type: regression, level: edge, pairs: edge_index}]",
        "training.num_epochs=15", "early_stopping.metric=val_loss",
    )  # fmt: skip
    _, history, metrics = train(cfg)
    assert history[-1]["val_mse"] < 0.5 * history[0]["val_mse"]
    predictions = qg.runs.layout.read_predictions(cfg.run_dir)["flow"]
    test = select_split(rings_with_edge_heat(), cfg.data, "test")  # as the run drew it
    assert len(predictions["pair"]) == sum(g.edge_index.shape[1] for g in test)
    for graph, (i, j), true in zip(
        predictions["graph"], predictions["pair"], predictions["true"], strict=True
    ):  # each row names its graph and its edge's two nodes, numbered in the graph
        g = test[int(graph)]
        (edge,) = ((g.edge_index[0] == i) & (g.edge_index[1] == j)).nonzero()[0]
        assert true.item() == g.flow[edge].item()
    error = predictions["predicted"] - predictions["true"]
    assert metrics["test_mse"] == pytest.approx(float((error**2).mean()), rel=1e-9)


def test_a_matrix_target_off_the_relations_names_the_sample(make_config, tmp_path, capsys):
    path, _, (i, j) = write_sets(tmp_path / "bad.zarr", count=6, extra=3)
    cfg = edge_config(make_config, path, "training.num_epochs=1")
    config = tmp_path / "bad.yaml"
    config.write_text(dump_config(cfg))
    assert_refused(
        run_main(capsys, "train", config),
        "cset_4", "'interval' is not zero at 1 pair(s) that are not a relation of the causal "
        f"set (elements {i} and {j}, as the file numbers them)",
    )  # fmt: skip
    # without data.pairs, a matrix has no pairs to be read at
    assert_refused(
        run_main(capsys, "train", config, "data.pairs=null", "tasks=[{name: y, target: y}]",
                 "data.targets={y: interval}", "early_stopping.metric=val_loss"),
        "cset_1", "'interval' (data.targets.y) is a matrix of", "set data.pairs",
    )  # fmt: skip


def test_links_and_stacked_files_give_their_pairs(make_config, tmp_path):
    """data.pairs: links gives each graph its links as links_index; in a stacked file (sample
    first, zero-padded) a matrix target is read at the pairs of each sample's own size."""
    path, truth, _ = write_sets(tmp_path / "sets.zarr", count=4)
    cfg = edge_config(make_config, path, "data.pairs=links", "data.targets={is_link: is_link}",
                      "tasks=[{name: is_link, type: binary, level: edge, pairs: links_index}]")  # fmt: skip
    for graph, (_, links, _) in zip(
        qg.data.dataset_from_config(cfg.data, progress=False, provenance=True), truth, strict=True
    ):
        element = graph.source_element.numpy()
        pairs = element[graph.links_index.numpy()]  # as the file numbers them
        assert sorted(map(tuple, pairs.T)) == sorted(map(tuple, np.argwhere(links)))
        assert (graph.is_link.numpy() == 1).all()  # read at the links

    pad = 30
    relations = np.zeros((len(truth), pad, pad), dtype=np.uint8)
    intervals = np.zeros((len(truth), pad, pad), dtype=np.float32)
    for s, (r, _, interval) in enumerate(truth):
        relations[s, : len(r), : len(r)], intervals[s, : len(r), : len(r)] = r, interval
    root = zarr.open_group(str(tmp_path / "stacked.zarr"), mode="w")
    root.create_array("adjacency_matrix", data=relations)
    root.create_array("interval", data=intervals)
    root.create_array("cset_size", data=np.array([len(r) for r, _, _ in truth]))
    cfg = edge_config(make_config, tmp_path / "stacked.zarr", "data.transpose=false",
                      "data.targets={interval: interval}")  # fmt: skip
    graphs = qg.data.dataset_from_config(cfg.data, progress=False, provenance=True)
    for graph, (r, _, interval) in zip(graphs, truth, strict=True):
        element = graph.source_element.numpy()
        first, second = element[graph.relations_index.numpy()]
        assert r[first, second].all() and len(first) == r.sum()
        assert np.array_equal(graph.interval.numpy(), interval[first, second])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["tasks=[{name: is_link, type: binary, level: edge}]"],
            "tasks[0].pairs: task 'is_link' is edge-level; name the attribute of its node pairs",
        ),
        (
            ["tasks=[{name: is_link, type: binary, pairs: relations_index}]"],
            "tasks[0].pairs: only for an edge-level task (level: edge); task 'is_link' is "
            "graph-level",
        ),
        (
            ["tasks=[{name: is_link, type: binary, level: edge, pairs: relations}]"],
            "tasks[0].pairs: 'relations' must have \"index\" in its name",
        ),
        (
            ["tasks=[{name: is_link, type: binary, level: edge, pairs: bonds_index}]"],
            "tasks[0].pairs: the data has no tensor attribute 'bonds_index' for the pairs of "
            "task 'is_link'",
        ),
        (
            ["tasks=[{name: is_link, type: binary, level: edge, pairs: relation_index}]"],
            "'relation_index' for the pairs of task 'is_link'; did you mean relations_index?",
        ),
        (
            ["tasks=[{name: is_link, type: binary, level: edge, pairs: links_index}]"],
            "tasks[0].pairs: links_index is what data.pairs: links makes",
        ),
        (
            ["tasks=[{name: is_link, type: binary, level: edge, pairs: edge_index}]"],
            "tasks[0].target: task 'is_link' is edge-level, so 'is_link' needs one row per pair "
            "of 'edge_index'",
        ),
        (  # read at the links, the interval sizes of longer relations are off them
            ["data.pairs=links", TASKS.replace("relations_index", "links_index")],
            "'interval' is not zero at",
        ),
        (
            ["data.pairs=links"],
            "tasks[0].pairs: relations_index is what data.pairs: relations makes of the causal "
            "sets (found data.pairs: links); set data.pairs: relations",
        ),
        (
            ["augmentation.preset=mild"],
            "augmentation.preset: not with an edge-level task (tasks[0], 'is_link')",
        ),
        (
            ["training.batch_nodes=200", "training.pad_batches=true"],
            "training.pad_batches: not with an edge-level task",
        ),
    ],
)
def test_what_an_edge_task_cannot_use_is_one_line(
    make_config, sets, tmp_path, capsys, overrides, message
):
    path, _, _ = sets
    config = tmp_path / "c.yaml"
    config.write_text(dump_config(edge_config(make_config, path, "training.num_epochs=1")))
    assert_refused(run_main(capsys, "train", config, *overrides), message)


@pytest.mark.parametrize("kind", ["dimension", "manifold_like"])
def test_generated_causal_sets_carry_their_pairs_and_targets_from_the_geometry(make_config, kind):
    """data.pairs on the generated data: each sprinkling's relations as relations_index, with
    is_link and interval_size at them, the same as its coordinates say (light cones in numpy,
    not the package's code); the other kinds' sets (drawn one by one) carry them too."""
    cfg = make_config(f"data.kind={kind}", "data.dimensions=[2]", "data.num_graphs=12",
                      "data.pairs=relations")  # fmt: skip
    graphs = qg.data.dataset_from_config(cfg.data, progress=False)
    for graph in graphs:
        n = graph.num_nodes
        links = np.zeros((n, n), dtype=bool)  # the graph's own links, each way: i < j
        i, j = graph.edge_index.numpy()
        links[i[i < j], j[i < j]] = True
        relations = links.copy()
        for _ in range(n):  # closed by hand: a relation is a chain of links
            closed = relations | ((relations.astype(int) @ relations.astype(int)) > 0)
            if (closed == relations).all():
                break
            relations = closed
        if graph.pos is not None:  # a sprinkling: the light cones of its coordinates agree
            assert np.array_equal(light_cone_order(graph.pos[:, :2].numpy())[0], relations)
        first, second = graph.relations_index.numpy()
        assert np.array_equal(np.argwhere(relations), graph.relations_index.t().numpy())
        between = relations.astype(int) @ relations.astype(int)
        assert np.array_equal(graph.is_link.numpy(), links[first, second])
        assert np.array_equal(graph.interval_size.numpy(), between[first, second])
    cfg = make_config("data.kind=dimension", "data.dimensions=[2]", "data.num_graphs=60",
                      "data.pairs=relations", "training.num_epochs=1",
                      "early_stopping.metric=val_loss",
                      "tasks=[{name: is_link, type: binary, level: edge, pairs: relations_index}]")  # fmt: skip
    _, history, metrics = train(cfg)
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and history[0]["val_loss"] > 0


def test_pairs_of_a_users_own_dataset_are_their_own(make_config):
    with pytest.raises(qg.ConfigError, match=r"data.pairs: data.dataset \(user_data.ring_graphs\)"):
        make_config("data.dataset=user_data.ring_graphs", "data.pairs=relations")


def test_disk_storage_keeps_no_per_pair_target_in_memory(make_config, tmp_path):
    """data.storage: disk keeps each graph's labels in memory, never its per-pair targets
    (about n^2 / 4 of them a set): those are read with the batch, at the right node offsets."""
    path, _, _ = write_sets(tmp_path / "sets.zarr", count=10)
    generated = make_config("data.dimensions=[2]", "data.num_graphs=20", "data.pairs=relations",
                            "data.storage=disk")  # fmt: skip
    from_files = edge_config(make_config, path, "data.storage=disk")
    for cfg, pair_targets in ((generated, {"is_link", "interval_size"}),
                              (from_files, {"is_link", "interval"})):  # fmt: skip
        dataset = qg.data.dataset_from_config(cfg.data, progress=False)
        assert type(dataset).__name__ == "DiskDataset"
        assert not pair_targets & set(dataset._labels.keys())
        batch = next(iter(qg.data.make_loader(dataset, batch_size=7)))
        expected = Batch.from_data_list([dataset[i] for i in range(7)])
        for key in ("relations_index", *pair_targets):
            assert torch.equal(batch[key], expected[key]), key
    with pytest.raises(qg.ConfigError, match=r"augmentation.preset: not with data.pairs"):
        make_config("data.pairs=relations", "augmentation.preset=mild")


def test_a_pair_target_of_one_value_per_element_in_one_file_sample_is_one_line(
    make_config, tmp_path, capsys
):
    """The first sample's interval matrix is read at its relations; a later sample holding one
    value per element gave a shape traceback in the loss. Now one line names the file, the
    sample's group and the attribute."""
    path, truth, _ = write_sets(tmp_path / "sets.zarr", count=10)
    n = len(truth[3][0])
    group = zarr.open_group(str(path), mode="a")["cset_4"]
    del group["interval"]
    group.create_array("interval", data=np.ones(n, dtype=np.float32))
    config = tmp_path / "c.yaml"
    config.write_text(dump_config(edge_config(make_config, path, "training.num_epochs=1")))
    assert_refused(
        run_main(capsys, "train", config),
        f"data.files: {path}: cset_4: 'interval' needs one row per pair of 'relations_index'",
        f"found {n} rows",
    )
