"""``qg predict`` and ``qg.predict``/``qg.load_model``: a trained run's model on its own test
split (``test_predictions.npz``), on new Zarr and HDF5 files in QuantumGrav.jl's layouts
(one row per causal set, in input order, with where it came from), on 1 and 2 processes (the
same bytes), and one line for each bad input.

Bits are compared only between results computed in the same batches on one thread each (1 and 2
processes); the same graphs in other batches, or the run's own test pass, agree within CLOSE."""

import csv
import dataclasses
import json
import shutil

import h5py
import numpy as np
import pytest
import torch
from conftest import assert_refused, run_main, small_raw_config
from torch_geometric.data import Batch

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.data import read_files
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.predict import read

pytestmark = pytest.mark.timeout(240)

TASKS = (
    "tasks=[{name: dim, target: y}, {name: d, target: dimension, type: regression}, "
    "{name: time, type: regression, level: node}]"
)
# New causal sets: the generator of the embedded data with another seed, as a user's files.
NEW = {"num_graphs": 30, "num_points": [12, 20], "dimensions": [2, 3, 4], "seed": 11}
LABELS = "data.targets={y: y, dimension: dimension, time: time}"
# The same graphs computed another way (in other batches, or on another number of threads) by
# the same float32 model: each matrix product may add in another order, a few units in the last
# place per product, through a handful of layers. Seen here across batches, threads and kernel
# paths: at most 6e-8 on outputs of order 1. 1e-5 leaves a hundredfold margin and is far below
# what a wrong graph, weight or order of rows changes (1e-2 and more).
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained run with a classification, a graph-level and a node-level regression."""
    tmp = tmp_path_factory.mktemp("predict")
    raw = apply_overrides(
        small_raw_config(tmp, tmp / "data"), [TASKS, "training.num_epochs=2", "data.seed=4"]
    )
    qg_config = config_from_dict(raw)
    trainer = qg.Trainer(qg_config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.run_test(test_loader)
    trainer.close()
    new = config_from_dict({"data": {"root": str(tmp / "new-cache"), **NEW}})
    files = {fmt: write_embedded(new.data, tmp / f"new.{fmt}") for fmt in ("zarr", "h5")}
    return qg_config.run_dir, files, tmp


def test_predicting_the_test_split_gives_the_runs_test_predictions(run, capsys):
    run_dir, _, _ = run
    result = run_main(capsys, "predict", run_dir, "--split", "test")
    assert result.returncode == 0, result.stderr
    written = read(run_dir / "predictions.npz")
    test = np.load(run_dir / "test_predictions.npz")
    probs = np.stack([written.graphs[f"dim_prob_{k}"] for k in range(3)], axis=1)
    # the same batches, but on one thread, where the run's test pass used the worker's threads
    assert np.allclose(probs, test["dim.predicted"], **CLOSE)
    assert np.array_equal(written.graphs["dim_true"], test["dim.true"])
    assert np.allclose(written.graphs["d"], test["d.predicted"].reshape(-1), **CLOSE)
    assert np.allclose(written.nodes["time"], test["time.predicted"].reshape(-1), **CLOSE)
    assert np.array_equal(written.nodes["graph"], test["time.graph"])
    # the metrics printed are the run's test metrics
    summary = json.loads((run_dir / "summary.json").read_text())
    assert f"test_dim_accuracy {summary['test_dim_accuracy']:.4f}" in result.stdout
    assert f"test_loss {summary['test_loss']:.4f}" in result.stdout
    # each row says which generated causal set it is: the positions of the seeded test split
    _, _, test_split = qg.split_dataset(list(range(120)), (0.7, 0.15, 0.15), 4)
    assert written.graphs["index"].tolist() == list(test_split)
    assert set(written.graphs["source"]) == {"generated"}
    # and so does each row of the run's own test predictions
    assert test["dim.index"].tolist() == list(test_split)
    assert set(test["dim.source"]) == {"generated"}


def test_zarr_and_hdf5_files_give_one_row_per_causal_set_in_input_order(run):
    run_dir, files, _ = run
    out = qg.predict(run_dir, [str(files["zarr"]), str(files["h5"])], overrides=[LABELS])
    n = NEW["num_graphs"]
    assert len(out) == 2 * n
    assert out.graphs["source"].tolist() == [str(files["zarr"])] * n + [str(files["h5"])] * n
    assert out.graphs["index"].tolist() == list(range(n)) * 2
    assert out.graphs["group"].tolist() == [f"cset_{i + 1}" for i in range(n)] * 2
    # Julia's column-major groups read back as the sets they were written from: the same
    # predictions as the generated sets themselves, and for both formats
    # (in other batches: the 30 sets of one file share a batch with sets of the other)
    generated = qg.predict(run_dir, overrides=[f"data.{k}={v}" for k, v in NEW.items()])
    for column in ("dim_prob_0", "dim_prob_2", "d"):
        assert np.allclose(out.graphs[column][:n], generated.graphs[column], **CLOSE)
        assert np.allclose(out.graphs[column][n:], generated.graphs[column], **CLOSE)
    assert np.array_equal(out.graphs["dim_true"][:n], generated.graphs["dim_true"])
    assert np.allclose(
        out.nodes["time"][: len(generated.nodes["time"])], generated.nodes["time"], **CLOSE
    )
    labels = np.concatenate([generated.graphs["dim_true"]] * 2)
    assert np.array_equal(out.graphs["dim_true"], labels)
    accuracy = float((out.graphs["dim_class"] == labels).mean())
    assert out.metrics["predict_dim_accuracy"] == pytest.approx(accuracy)


def test_one_and_two_processes_write_the_same_bytes(run, capsys, tmp_path):
    run_dir, files, _ = run
    outputs = {}
    for w in (1, 2):
        target = tmp_path / f"w{w}.csv"
        result = run_main(
            capsys, "predict", run_dir, "--files", files["h5"], files["zarr"],
            "--output", target, "--world-size", w,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"{2 * NEW['num_graphs']} graphs and" in result.stdout
        outputs[w] = (target.read_bytes(), (tmp_path / f"w{w}_nodes.csv").read_bytes())
    assert outputs[1] == outputs[2]
    rows = list(csv.DictReader(outputs[1][0].decode().splitlines()))
    assert [r["source"] for r in rows[:2]] == [str(files["h5"])] * 2
    assert {"dim_class", "dim_prob_0", "dim_prob_1", "dim_prob_2", "d"} <= set(rows[0])
    assert "dim_true" not in rows[0]  # the run read no labels from files: none are shown
    nodes = list(csv.DictReader(outputs[1][1].decode().splitlines()))
    assert list(nodes[0]) == ["source", "index", "group", "element", "time"]


def test_node_rows_name_the_element_as_the_file_numbers_it(run, tmp_path):
    """Causal sets stored in no natural order are relabelled to be read; each node row still
    names the element by its number in the file."""
    run_dir, _, _ = run
    rng = np.random.default_rng(0)
    plain, shuffled, perms = tmp_path / "plain.h5", tmp_path / "shuffled.h5", []
    with h5py.File(plain, "w") as a, h5py.File(shuffled, "w") as b:
        for i in range(4):
            relations = qg.sprinkle(12 + i, 2, seed=i).relations.numpy().astype(np.uint8)
            perm = rng.permutation(len(relations))
            perms.append(perm)
            a.create_group(f"cset_{i + 1}").create_dataset("adj", data=relations.T)
            b.create_group(f"cset_{i + 1}").create_dataset("adj", data=relations[perm][:, perm].T)
    first = qg.predict(run_dir, [str(plain)])
    second = qg.predict(run_dir, [str(shuffled)], overrides=["data.transpose=true"])
    assert np.allclose(first.graphs["dim_prob_1"], second.graphs["dim_prob_1"], atol=1e-6)
    # element e of the shuffled file is element perm[e] of the plain one: the same prediction
    for g, perm in enumerate(perms):
        mine = second.nodes["graph"] == g
        assert sorted(second.nodes["element"][mine]) == list(range(len(perm)))
        plain_values = first.nodes["time"][first.nodes["graph"] == g]
        for e, value in zip(second.nodes["element"][mine], second.nodes["time"][mine], strict=True):
            assert value == pytest.approx(plain_values[perm[e]], abs=1e-5)


def test_load_model_gives_the_model_with_what_it_needs(run):
    run_dir, files, tmp = run
    loaded = qg.load_model(run_dir)
    assert not loaded.model.training and [t.name for t in loaded.tasks] == ["dim", "d", "time"]
    assert loaded.tasks[1].scaled  # the regression target's scaling came with it
    out = qg.predict(run_dir, [str(files["h5"])])
    graphs = read_files(dataclasses.replace(loaded.config.data, files=(str(files["h5"]),)))
    values = loaded.predict_batch(Batch.from_data_list(graphs[:5]))  # a batch of its own
    assert np.allclose(values["dim"][:, 0].numpy(), out.graphs["dim_prob_0"][:5], **CLOSE)
    # a checkpoint written before the model's dimensions were recorded still loads
    old = tmp / "old.pt"
    state = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    del state["model_spec"]
    torch.save(state, old)
    again = qg.load_model(run_dir, old)
    for a, b in zip(
        loaded.model.state_dict().values(), again.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)


def test_bad_inputs_get_one_line_and_nothing_is_overwritten(run, capsys, tmp_path):
    run_dir, files, _ = run
    assert_refused(run_main(capsys, "predict", tmp_path / "nope"), "nope: no such run directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(run_main(capsys, "predict", empty), "not a run directory", "config.yaml")
    no_best = tmp_path / "no_best"
    shutil.copytree(run_dir, no_best)
    (no_best / "checkpoints" / "best.pt").unlink()
    assert_refused(run_main(capsys, "predict", no_best), "best.pt: no such checkpoint", "last.pt")
    assert_refused(
        run_main(capsys, "predict", run_dir, "--checkpoint", tmp_path / "x.pt"),
        "checkpoint not found",
    )
    # a file without an array the model reads: here the per-element features it was not given
    bare = tmp_path / "bare.h5"
    with h5py.File(bare, "w") as f:
        f.create_group("cset_1").create_dataset("adj", data=np.triu(np.ones((4, 4)), 1).T)
    assert_refused(
        run_main(
            capsys, "predict", run_dir, "--files", bare, "data.node_features=[time]",
            "--output", tmp_path / "p.npz",
        ),
        str(bare), "'time'",
    )  # fmt: skip
    existing = tmp_path / "kept.npz"
    existing.write_bytes(b"earlier results")
    result = run_main(capsys, "predict", run_dir, "--files", files["h5"], "--output", existing)
    assert_refused(result, "kept.npz exists", "--overwrite")
    assert existing.read_bytes() == b"earlier results"
    nodes = tmp_path / "t_nodes.csv"
    nodes.write_text("earlier")
    result = run_main(capsys, "predict", run_dir, "--output", tmp_path / "t.csv")
    assert_refused(result, "t_nodes.csv exists")
    assert_refused(run_main(capsys, "predict", run_dir, "--output", "p.txt"), ".npz or .csv")
    result = run_main(capsys, "predict", run_dir, "--output", existing, "--overwrite")
    assert result.returncode == 0 and len(read(existing)) == 120


def test_a_binary_task_gives_the_probability_of_1_and_the_class(tmp_path):
    from QuantumGravPy.config import TaskConfig
    from QuantumGravPy.predict.outputs import task_columns
    from QuantumGravPy.training.tasks.task import Task

    binary = Task(TaskConfig(name="m", type="binary"), 1, torch.nn.BCEWithLogitsLoss())
    columns = task_columns(binary, torch.tensor([0.2, 0.7]), torch.tensor([0, 1]))
    assert columns["m_prob"].tolist() == pytest.approx([0.2, 0.7])
    assert columns["m_class"].tolist() == [0, 1] and columns["m_true"].tolist() == [0, 1]
    labelled = Task(TaskConfig(name="c", classes=(1, 2, 3)), 3, torch.nn.CrossEntropyLoss())
    columns = task_columns(labelled, torch.tensor([[0.1, 0.2, 0.7]]), torch.tensor([1]))
    assert columns["c_class"].tolist() == [3] and columns["c_true"].tolist() == [2]
    assert set(columns) == {"c_class", "c_prob_1", "c_prob_2", "c_prob_3", "c_true"}


def test_a_users_own_graphs_are_predicted_by_the_command_and_from_python(tmp_path, capsys):
    """A run over data.dataset (a list of Data, no causal-set provenance) with a graph-level
    and a node-level task: ``qg predict`` writes graph rows keyed by position and node rows by
    element (the node's position in its graph), for all graphs and a split; ``qg.predict``
    and ``predict_batch`` take one Data or a list of them, on 1 and 2 processes."""
    import user_data

    raw = apply_overrides(
        small_raw_config(tmp_path, tmp_path / "data"),
        [
            "data.dataset=user_data.rings_with_heat",
            "tasks=[{name: shape, target: y}, {name: heat, type: regression, level: node}]",
            "training.num_epochs=1",
        ],
    )
    config = config_from_dict(raw)
    trainer = qg.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    run_dir = config.run_dir
    graphs = user_data.rings_with_heat()
    # the command, over the run's own data function: every graph, then the test split
    result = run_main(capsys, "predict", run_dir, "--output", tmp_path / "all.csv")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "all.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["index"] for r in rows] == [str(i) for i in range(len(graphs))]
    assert {r["source"] for r in rows} == {"user_data.rings_with_heat"}
    with open(tmp_path / "all_nodes.csv") as f:
        nodes = list(csv.DictReader(f))
    assert len(nodes) == sum(g.num_nodes for g in graphs)
    first = [(r["index"], r["element"]) for r in nodes[: graphs[0].num_nodes]]
    assert first == [("0", str(e)) for e in range(graphs[0].num_nodes)]
    split = run_main(capsys, "predict", run_dir, "--split", "test", "--output", tmp_path / "t.npz")
    assert split.returncode == 0, split.stderr
    _, _, test = qg.data.split_dataset(graphs, config.data.split, config.data.seed)
    assert read(tmp_path / "t.npz").graphs["index"].tolist() == list(test.indices)
    # from Python, on graphs the caller holds: a list, on 1 and 2 processes, and one graph
    mine = graphs[:7]
    one = qg.predict(run_dir, mine)
    two = qg.predict(run_dir, mine, world_size=2)
    assert one.graphs["index"].tolist() == list(range(7))
    assert set(one.graphs["source"]) == {"graphs"}
    for table in ("graphs", "nodes"):
        a, b = getattr(one, table), getattr(two, table)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert len(one.nodes["heat"]) == sum(g.num_nodes for g in mine)
    assert qg.predict(run_dir, graphs[3]).graphs["shape_class"].tolist() == [
        one.graphs["shape_class"][3]
    ]
    model = qg.load_model(run_dir)
    alone = model.predict_batch(graphs[3])
    together = model.predict_batch(mine)
    assert alone["shape"].shape == (1, 2) and together["heat"].shape == (len(one.nodes["heat"]), 1)
    torch.testing.assert_close(alone["shape"][0], together["shape"][3], **CLOSE)
    np.testing.assert_allclose(together["heat"][:, 0].numpy(), one.nodes["heat"], **CLOSE)
