"""Causal sets from Zarr and HDF5 files: both layouts, both orientations, the cache, training in
one and two processes, and one clear error for each kind of bad file."""

import csv
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import zarr
from conftest import (
    assert_refused,
    light_cone_order,
    run_main,
    run_ranks,
    undirected_edges,
    write_config,
)
from torch_geometric.data import Data

import QuantumGravPy as qg
from QuantumGravPy.data import CausalSetDataset
from QuantumGravPy.data.sources.files import FileDataset, read_files
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.physics import (
    causal_structure,
    natural_labelling,
    order_violation,
    sprinkle,
    transitive_closure,
    transitive_reduction,
)

pytestmark = pytest.mark.timeout(180)

GENERATED = {"num_graphs": 40, "num_points": [12, 20], "dimensions": [2, 3, 4], "seed": 3}
TARGETS = "data.targets={y: y, dimension: dimension, time: time}"


# --- the physics of orders ------------------------------------------------------------------


def test_closure_and_reduction_recover_a_sprinklings_relations_and_links():
    for dimension in (2, 3, 4):
        c = sprinkle(40, dimension, seed=dimension)
        assert torch.equal(transitive_closure(c.links), c.relations)
        assert torch.equal(transitive_reduction(c.relations), c.links)
        assert order_violation(c.relations) is None
        shuffle = torch.randperm(40, generator=torch.Generator().manual_seed(0))
        mixed = c.relations[shuffle][:, shuffle]
        order = natural_labelling(mixed)
        assert not mixed[order][:, order].tril().any()  # every relation points forwards


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.fill_diagonal_(True), "element 0 precedes itself"),
        (lambda r: r.__setitem__((5, 2), True), "elements 2 and 5 precede each other"),
        (lambda r: r.__setitem__((0, 2), False), "0 precedes 2 through others but not directly"),
    ],
)
def test_a_matrix_that_is_not_a_partial_order_is_named(edit, message):
    relations = torch.ones(6, 6, dtype=torch.bool).triu(1)
    edit(relations)
    assert message in order_violation(relations)


# --- files written by us, as Julia would, and by Python -------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The embedded causal sets, written as Zarr and HDF5 (groups, Julia's orientation)."""
    root = tmp_path_factory.mktemp("files")
    cfg = qg.config.config_from_dict({"data": {"root": str(root / "cache"), **GENERATED}})
    written = {fmt: write_embedded(cfg.data, root / f"sets.{fmt}") for fmt in ("zarr", "h5")}
    reference = CausalSetDataset(str(root / "cache"), **GENERATED, progress=False)
    return root, written, reference


def stacked(path, graphs, *, julia: bool, fmt: str, pad: int = 24):
    """The graphs as stacked arrays (sample index first, zero-padded to ``pad``)."""
    count = len(graphs)
    adj = np.zeros((count, pad, pad), dtype=np.uint8)
    time = np.zeros((count, pad), dtype=np.float32)
    for s, g in enumerate(graphs):
        r = causal_structure(g.pos[None])[0][0].numpy()
        n = len(r)
        adj[s, :n, :n] = r.T if julia else r
        time[s, :n] = g.time.numpy()
    arrays = {
        "adjacency_matrix": adj,
        "time": time,
        "cset_size": np.array([g.num_nodes for g in graphs]),
        "dimension": np.array([float(g.dimension) for g in graphs]),
        "y": np.array([int(g.y) for g in graphs]),
    }
    if fmt == "zarr":
        root = zarr.open_group(str(path), mode="w")
        for name, value in arrays.items():
            root.create_array(name, data=value)
    else:
        with h5py.File(path, "w") as f:
            for name, value in arrays.items():
                f.create_dataset(name, data=value)
    return path


def file_config(make_config, files, *overrides):
    return make_config(f"data.files={files}", TARGETS, *overrides)


def assert_same_graphs(dataset, reference):
    assert len(dataset) == len(reference)
    for g, r in zip(dataset, reference, strict=True):
        assert torch.equal(g.edge_index, r.edge_index) and torch.allclose(g.x, r.x)
        assert int(g.y) == int(r.y) and float(g.dimension) == float(r.dimension)
        assert torch.equal(g.time, r.time)


def raw_groups(path):
    """Every group's arrays exactly as stored, read with zarr or h5py (not with our reader)."""
    if path.suffix == ".zarr":
        root = zarr.open_group(str(path), mode="r")
        return {name: {k: root[name][k][...] for k in root[name].array_keys()}
                for name in root.group_keys()}  # fmt: skip
    with h5py.File(path, "r") as f:
        return {name: {k: f[name][k][...] for k in f[name]} for name in f}


@pytest.mark.parametrize("fmt", ["zarr", "h5"])
def test_qg_generate_writes_julias_column_major_orientation(embedded, fmt):
    """Julia's ``adj[i, j]`` (i precedes j) stored column-major reads in row-major Python as
    ``adj[j, i]``: every stored matrix is the transpose of the light-cone order."""
    _, written, reference = embedded
    groups = raw_groups(written[fmt])
    assert sorted(groups, key=lambda g: int(g.split("_")[1])) == [
        f"cset_{i}" for i in range(1, len(reference) + 1)
    ]
    for i, graph in enumerate(reference, start=1):
        relations, links = light_cone_order(graph.pos)
        assert relations.any() and not np.array_equal(relations, relations.T)
        stored = groups[f"cset_{i}"]
        assert stored["adj"].dtype == np.uint8 and stored["linkmat"].dtype == np.uint8
        assert np.array_equal(stored["adj"], relations.T.astype(np.uint8)), i
        assert np.array_equal(stored["linkmat"], links.T.astype(np.uint8)), i
        assert np.array_equal(stored["time"], graph.time.numpy())
        assert stored["dimension"].tolist() == [float(graph.dimension)]


def time_reversed(x):
    """Node features of the time-reversed order: past and future columns swap places."""
    return x[:, [1, 0, 3, 2, 5, 4]]


def sorted_rows(x):
    return sorted(map(tuple, x.tolist()))


@pytest.mark.parametrize("fmt", ["zarr", "h5"])
def test_an_explicit_data_transpose_is_obeyed_whatever_the_matrix_looks_like(
    make_config, embedded, tmp_path, fmt
):
    """true reads Julia's files, false Python's; the wrong one reads the time-reversed order
    (the setting is not second-guessed from the matrix)."""
    _, written, reference = embedded
    python = stacked(tmp_path / f"python.{fmt}", list(reference), julia=False, fmt=fmt)
    for path, setting in ((written[fmt], "true"), (python, "false")):
        dataset = FileDataset(
            file_config(make_config, [str(path)], f"data.transpose={setting}").data,
            progress=False,
        )
        assert_same_graphs(dataset, reference)
    for path, setting in ((written[fmt], "false"), (python, "true")):
        dataset = FileDataset(
            file_config(make_config, [str(path)], f"data.transpose={setting}").data,
            progress=False,
        )
        for read, graph in zip(dataset, reference, strict=True):
            assert sorted_rows(read.x) == sorted_rows(time_reversed(graph.x))
            assert sorted(read.time.tolist()) == sorted(graph.time.tolist())
            assert not torch.equal(read.time, graph.time)  # relabelled: latest element first


@pytest.mark.parametrize("fmt", ["zarr", "h5"])
def test_groups_in_julias_orientation_read_as_the_embedded_graphs(make_config, embedded, fmt):
    _, written, reference = embedded
    dataset = FileDataset(file_config(make_config, [str(written[fmt])]).data, progress=False)
    assert_same_graphs(dataset, reference)


@pytest.mark.parametrize("fmt", ["zarr", "h5"])
@pytest.mark.parametrize("julia", [True, False])
def test_stacked_padded_arrays_in_either_orientation(make_config, embedded, tmp_path, fmt, julia):
    _, _, reference = embedded
    path = stacked(tmp_path / f"stacked.{fmt}", list(reference), julia=julia, fmt=fmt)
    dataset = FileDataset(file_config(make_config, [str(path)]).data, progress=False)
    assert_same_graphs(dataset, reference)


def test_causal_sets_in_no_natural_order_are_relabelled(make_config, embedded, tmp_path):
    """Elements shuffled: data.transpose must be given, and the graph is the same up to order."""
    _, _, reference = embedded
    g = reference[0]
    r = causal_structure(g.pos[None])[0][0]
    shuffle = torch.randperm(len(r), generator=torch.Generator().manual_seed(1))
    with h5py.File(tmp_path / "mixed.h5", "w") as f:
        group = f.create_group("cset_1")
        group.create_dataset("adj", data=r[shuffle][:, shuffle].numpy().astype(np.uint8))
        group.create_dataset("time", data=g.time[shuffle].numpy())
    files = f"[{tmp_path / 'mixed.h5'}]"
    with pytest.raises(qg.DataError, match="triangular in neither orientation"):
        FileDataset(make_config(f"data.files={files}").data, progress=False)
    (read,) = FileDataset(
        make_config(
            f"data.files={files}", "data.transpose=false", "data.targets={time: time}"
        ).data,
        progress=False,
    )
    assert torch.equal(read.x[read.time.argsort()], g.x[g.time.argsort()])
    # element k of the graph read is the element of the sprinkling with its time: through that
    # map its edges are exactly the sprinkling's links, and they point forwards (a natural order)
    origin = {t: i for i, t in enumerate(g.time.tolist())}
    of = [origin[t] for t in read.time.tolist()]
    edges = undirected_edges(read.edge_index)
    assert {(of[i], of[j]) for i, j in edges} == undirected_edges(g.edge_index)
    _, links = light_cone_order(g.pos)
    assert {(of[i], of[j]) for i, j in edges if i < j} == set(zip(*links.nonzero(), strict=True))


def test_links_alone_are_enough(make_config, embedded, tmp_path):
    _, _, reference = embedded
    root = zarr.open_group(str(tmp_path / "links.zarr"), mode="w")
    for s, g in enumerate(reference, start=1):
        links = causal_structure(g.pos[None])[1][0]
        group = root.create_group(f"cset_{s}")
        group.create_array("linkmat", data=links.numpy().T.astype(np.uint8))
    dataset = FileDataset(make_config(f"data.files=[{tmp_path / 'links.zarr'}]").data)
    assert all(
        torch.equal(a.edge_index, b.edge_index) and torch.allclose(a.x, b.x)
        for a, b in zip(dataset, reference, strict=True)
    )


def test_the_cache_is_reused_until_a_file_changes(make_config, embedded, tmp_path):
    _, _, reference = embedded
    path = stacked(tmp_path / "s.h5", list(reference)[:10], julia=True, fmt="h5")
    cfg = file_config(make_config, [str(path)])
    first = FileDataset(cfg.data, progress=False)
    cache = first.processed_paths[0]
    built = os.stat(cache).st_mtime_ns
    again = FileDataset(cfg.data, progress=False)
    assert again.processed_paths[0] == cache and os.stat(cache).st_mtime_ns == built
    stacked(path, list(reference)[:12], julia=True, fmt="h5")  # the file changes
    changed = FileDataset(cfg.data, progress=False)
    assert changed.processed_paths[0] != cache and len(changed) == 12
    other = FileDataset(file_config(make_config, [str(path)], "data.targets={y: y}").data)
    assert other.processed_paths[0] != changed.processed_paths[0]  # another field mapping


# --- training from files --------------------------------------------------------------------


def test_qg_generate_writes_files_that_qg_train_learns_from(make_config, tmp_path, capsys):
    cfg = make_config("data.num_graphs=48")
    config_file = write_config(cfg, tmp_path / "gen.yaml")
    store = tmp_path / "sets.zarr"
    result = run_main(capsys, "generate", config_file, "--output", store)
    assert result.returncode == 0 and "48 causal sets written" in result.stdout
    again = run_main(capsys, "generate", config_file, "--output", store)
    assert_refused(again, f"{store} exists")
    # a format is named by the output's suffix or by --format, one of the registered ones
    unnamed = run_main(capsys, "generate", config_file, "--output", tmp_path / "sets.csv")
    assert_refused(unnamed, "sets.csv is not an .h5/.hdf5 file or a .zarr store", "--format")
    unknown = run_main(capsys, "generate", config_file, "--output", store, "--format", "hdf")
    assert_refused(unknown, "--format: unknown 'hdf' (known: hdf5, zarr); did you mean hdf5?")
    train = file_config(
        make_config, [str(store)], "tasks=[{name: dim, target: y}]", "training.num_epochs=1"
    )
    path = write_config(train, tmp_path / "train.yaml")
    trained = run_main(capsys, "train", path)
    assert trained.returncode == 0, trained.stderr
    assert "test_accuracy" in trained.stdout
    # each test prediction names the causal set it is of: its file, sample and group
    rows = qg.runs.layout.read_predictions(Path(train.training.path))["dim"]
    assert set(rows["source"]) == {str(store)} and len(set(rows["index"])) == len(rows["true"])
    sets = zarr.open_group(str(store), mode="r")
    for group, index, true in zip(rows["group"], rows["index"], rows["true"], strict=True):
        assert group == f"cset_{index + 1}" and int(
            np.asarray(sets[group]["y"]).reshape(-1)[0]
        ) == int(true)
    # predicting the test split reads the run's own cache (nothing prepared again)
    processed = Path(train.data.root) / "processed"
    before = sorted(p.name for p in processed.iterdir())
    table = tmp_path / "test_split.csv"
    predicted = run_main(
        capsys, "predict", train.training.path, "--split", "test", "--output", table
    )
    assert predicted.returncode == 0, predicted.stderr
    assert sorted(p.name for p in processed.iterdir()) == before
    written = list(csv.DictReader(table.read_text().splitlines()))
    assert [r["group"] for r in written] == list(rows["group"])


def train_from_files(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return len(trainer.dataset), history


def test_two_processes_train_from_files(make_config, embedded):
    _, written, _ = embedded
    cfg = file_config(
        make_config,
        [str(written["zarr"]), str(written["h5"])],
        "tasks=[{name: dim, target: y}, {name: time, type: regression, level: node}]",
        "training.num_epochs=2",
    )
    (size0, history0), (size1, history1) = run_ranks(2, train_from_files, cfg)
    assert size0 == size1 == 80 and history0 == history1 and len(history0) == 2


# --- bad files ------------------------------------------------------------------------------


def one_group(path, **arrays):
    with h5py.File(path, "w") as f:
        group = f.create_group("cset_1")
        for name, value in arrays.items():
            group.create_dataset(name, data=value)
    return path


CHAIN = np.triu(np.ones((4, 4), dtype=np.uint8), 1)


@pytest.mark.parametrize(
    "arrays, overrides, message",
    [
        ({"adj": CHAIN}, ["data.targets={m: manifold_like}"], "data.targets names array "
         "'manifold_like', which group cset_1 does not hold (it holds adj)"),
        ({"adj": CHAIN + CHAIN.T}, ["data.transpose=false"], "cset_1: 'adj' is not a strict "
         "partial order: elements 0 and 1 precede each other"),
        ({"adj": np.ones((3, 4), dtype=np.uint8)}, [], "'adj' is not square (shape [3, 4])"),
        ({"adj": CHAIN, "f": np.array([1.0, np.nan, 0, 0])}, ["data.node_features=[f]"],
         "cset_1: 'f' holds NaN or infinite values"),
        ({"adj": CHAIN, "f": np.ones(3)}, ["data.node_features=[f]"],
         "'f' (data.node_features) holds 3 values for 4 elements"),
        ({"adj": CHAIN, "t": np.ones(3)}, ["data.targets={t: t}"],
         "'t' (data.targets.t) holds 3 values for a causal set of 4 elements"),
        ({"links": CHAIN}, ["data.relations=adj"], "data.relations names array 'adj'"),
        ({"adj": CHAIN}, ["data.pre_filter=user_data.reject"], "data.pre_filter: "
         "user_data.reject rejected all 1 causal sets"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_error_naming_file_group_and_array(
    make_config, tmp_path, arrays, overrides, message
):
    path = one_group(tmp_path / "bad.h5", **arrays)
    cfg = make_config(f"data.files=[{path}]", *overrides)
    with pytest.raises(qg.DataError) as info:
        FileDataset(cfg.data, progress=False)
    assert message in str(info.value) and str(path) in str(info.value)
    assert not list(Path(cfg.data.root).glob("processed/*.tmp*"))  # nothing half-built


def test_bad_stacked_arrays_and_unreadable_stores_are_named(make_config, tmp_path):
    def refused(path, *overrides):
        with pytest.raises(qg.DataError) as info:
            FileDataset(make_config(f"data.files=[{path}]", *overrides).data, progress=False)
        return str(info.value)

    padded = np.zeros((2, 5, 5), dtype=np.uint8)
    padded[:, :4, :4] = CHAIN
    padded[1, 0, 4] = 1  # a relation in the padding of a 4-element sample
    with h5py.File(tmp_path / "pad.h5", "w") as f:
        f.create_dataset("adj", data=padded)
        f.create_dataset("cset_size", data=np.array([4, 4]))
    assert "sample 1 of 'adj' has size 4 but holds relations beyond it" in refused(
        tmp_path / "pad.h5"
    )
    with h5py.File(tmp_path / "sizes.h5", "w") as f:
        f.create_dataset("adj", data=padded)
        f.create_dataset("cset_size", data=np.array([4, 4, 4]))
    assert "'cset_size' holds 3 sizes for 2 samples" in refused(tmp_path / "sizes.h5")
    (tmp_path / "broken.h5").write_bytes(b"not an hdf5 file")
    assert "broken.h5: cannot be read as an HDF5 file (OSError: " in refused(tmp_path / "broken.h5")
    assert "matches no file or store" in refused(tmp_path / "none_*.zarr")


def test_two_processes_preprocess_the_same_graphs_as_one(make_config, embedded, tmp_path, capsys):
    """Contiguous ranges over both files; a filter and a transform run in every process."""
    _, written, _ = embedded
    cfg = file_config(
        make_config,
        [str(written["zarr"]), str(written["h5"])],
        "data.pre_filter=user_data.at_least_14_elements",
    )
    one = read_files(cfg.data, progress=False)
    assert 0 < len(one) < 80
    path = write_config(cfg, tmp_path / "files.yaml")
    result = run_main(capsys, "generate", path, "--world-size", "2")  # builds the cache
    assert result.returncode == 0, result.stderr
    assert f"{len(one)} graphs ready" in result.stdout
    two = FileDataset(cfg.data, progress=False)  # the cache the two processes built
    assert len(two) == len(one)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.time, b.time)


def test_per_element_feature_matrices_follow_the_files_orientation(make_config, tmp_path):
    """Julia's n x F feature matrix of a group reads as F x n: it is transposed with the
    causal matrix; stacked arrays (S x n x F once read) are not."""
    features = np.arange(12, dtype=np.float32).reshape(4, 3)  # 4 elements, 3 features
    one_group(tmp_path / "julia.h5", adj=CHAIN.T, features=features.T)
    one_group(tmp_path / "python.h5", adj=CHAIN, features=features)
    for name in ("julia.h5", "python.h5"):
        cfg = make_config(f"data.files=[{tmp_path / name}]", "data.node_features=[features]")
        (graph,) = FileDataset(cfg.data, progress=False)
        assert torch.equal(graph.x, torch.from_numpy(features)), name


def test_truncated_files_damaged_chunks_and_cyclic_links_are_named(make_config, tmp_path, capsys):
    def refused(path, *overrides):
        with pytest.raises(qg.DataError) as info:
            FileDataset(make_config(f"data.files=[{path}]", *overrides).data, progress=False)
        return str(info.value)

    sets = np.stack([CHAIN] * 64)
    with h5py.File(tmp_path / "cut.h5", "w") as f:
        f.create_dataset("adj", data=sets, chunks=(1, 4, 4), compression="gzip")
        f.create_dataset("cset_size", data=np.full(64, 4))
    whole = (tmp_path / "cut.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(whole[: len(whole) * 3 // 4])  # a copy cut short
    message = refused(tmp_path / "cut.h5")
    assert str(tmp_path / "cut.h5") in message
    assert "cannot be read" in message
    root = zarr.open_group(str(tmp_path / "damaged.zarr"), mode="w")
    root.create_group("cset_1").create_array("adj", data=CHAIN)
    (chunk,) = [p for p in (tmp_path / "damaged.zarr" / "cset_1" / "adj").rglob("*") if p.is_file()
                and p.name != "zarr.json"]  # fmt: skip
    chunk.write_bytes(b"\x00garbage")
    message = refused(tmp_path / "damaged.zarr")
    assert "damaged.zarr: cset_1: 'adj' cannot be read" in message
    cycle = np.zeros((3, 3), dtype=np.uint8)
    cycle[0, 1] = cycle[1, 2] = cycle[2, 0] = 1
    one_group(tmp_path / "cycle.h5", linkmat=cycle)
    message = refused(tmp_path / "cycle.h5", "data.transpose=false")
    assert "cset_1: 'linkmat' is not a strict partial order: the links close to a cycle" in message
    # at the command line: one line, no traceback, exit 2
    cfg = make_config(f"data.files=[{tmp_path / 'cut.h5'}]")
    config_file = write_config(cfg, tmp_path / "cut.yaml")
    result = run_main(capsys, "generate", config_file)
    assert_refused(result, "cannot be read", str(tmp_path / "cut.h5"))


def test_a_target_that_data_targets_does_not_read_is_named_before_any_file_is_read(
    make_config, embedded, tmp_path, capsys
):
    _, written, _ = embedded
    files = f"data.files=[{written['zarr']}]"
    cases = [
        (
            [files, "data.targets={y: y}", "tasks=[{name: manifold_like, type: binary}]"],
            "tasks[0].target: task 'manifold_like' learns the graph attribute 'manifold_like', "
            "but data.targets reads y from data.files; the files hold an array 'manifold_like': "
            "set data.targets: {manifold_like: manifold_like}",
        ),
        (
            [files, "data.root=" + str(tmp_path / "cache")],  # no tasks: its one task learns y
            "data.targets: the config has no tasks:, so its one task learns the graph attribute "
            "'y', but data.targets reads nothing from data.files; the files hold an array 'y'",
        ),
        (
            [files, "data.targets={y: y}", "tasks=[{name: mass, type: regression}]"],
            "map it to an array of the files, data.targets: {mass: ARRAY} (the first causal set "
            "holds adj, cset_type, dimension,",
        ),
    ]
    for overrides, expected in cases:
        path = write_config(make_config(*overrides), tmp_path / "cfg.yaml")
        assert_refused(run_main(capsys, "train", path), expected)
        assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def test_a_users_function_travels_to_fresh_processes_by_name():
    """data.transform goes to loader workers with the dataset: started afresh (spawn,
    forkserver), they get the function by its dotted name, and its errors stay what they are."""
    import pickle

    from QuantumGravPy.config import UserFunction

    hook = pickle.loads(pickle.dumps(UserFunction("user_data.fail_on_19_elements", "data.x")))
    graph = Data(x=torch.zeros(19, 1))
    with pytest.raises(qg.errors.RunError, match=r"a causal set of 19 elements \(user_data.py:"):
        hook(graph)
    assert hook(Data(x=torch.zeros(3, 1))).num_nodes == 3
