"""``data.storage``: the same graphs, the same training and the same results whether the
processed graphs are held in memory or read from disk a batch at a time; bounded memory on a
dataset several times larger than the limit a test sets itself; caches built whole or not at all.
"""

import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import run_main, run_ranks, train, write_config
from test_files import TARGETS, stacked
from torch.utils.data import Subset

import QuantumGravPy as qg
from QuantumGravPy.data import (
    CausalSetDataset,
    DiskDataset,
    FileSource,
    dataset_from_config,
    graph_attribute,
    in_memory_values,
    make_train_loader,
    split_dataset,
)
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.data.storage import disk as disk_module
from QuantumGravPy.data.storage.disk import _Table

pytestmark = pytest.mark.timeout(180)

GENERATED = {"num_graphs": 40, "num_points": [12, 20], "dimensions": [2, 3, 4], "seed": 5}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same causal sets as a Zarr store (groups, Julia's orientation) and an HDF5 file
    (stacked, padded, Python's orientation)."""
    root = tmp_path_factory.mktemp("storage")
    cfg = qg.config.config_from_dict({"data": {"root": str(root / "gen"), **GENERATED}})
    groups = write_embedded(cfg.data, root / "groups.zarr")
    reference = CausalSetDataset(str(root / "gen"), **GENERATED, progress=False)
    flat = stacked(root / "stacked.h5", list(reference), julia=False, fmt="h5")
    return groups, flat


def config(make_config, files, storage, *overrides):
    return make_config(
        f"data.files=[{files[0]}, {files[1]}]", TARGETS, f"data.storage={storage}", *overrides
    )


def numbers(history):
    """The history without its timings."""
    return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in history]


def assert_same(a, b):
    assert len(a) == len(b)
    for g, h in zip(a, b, strict=True):
        assert sorted(g.keys()) == sorted(h.keys())
        for key in g.keys():
            assert torch.equal(g[key], h[key]), key


def test_disk_holds_the_same_graphs_and_labels_as_memory(make_config, files, data_root):
    disk = dataset_from_config(config(make_config, files, "disk").data, progress=False)
    memory = dataset_from_config(config(make_config, files, "memory").data, progress=False)
    assert isinstance(disk, DiskDataset) and not isinstance(memory, DiskDataset)
    assert_same(disk, memory)
    # what samplers and tasks read comes from beside the table, in any subset's order
    part = [7, 3, 70, 3]
    for name in ("y", "dimension", "time"):
        assert torch.equal(
            in_memory_values(Subset(disk, part), name), in_memory_values(Subset(memory, part), name)
        )
    assert torch.equal(graph_attribute(disk, "y"), graph_attribute(memory, "y"))
    # the embedded causal sets too, generated straight into a table
    generated = make_config("data.storage=disk", "data.num_graphs=30")
    on_disk = dataset_from_config(generated.data, progress=False)
    in_memory = dataset_from_config(
        make_config("data.storage=memory", "data.num_graphs=30").data, progress=False
    )
    assert isinstance(on_disk, DiskDataset)
    assert_same(on_disk, in_memory)
    assert on_disk.num_classes_of("y") == len(generated.data.dimensions)  # not the labels drawn


@pytest.mark.parametrize("num_workers", [0, 1])
def test_training_from_disk_equals_training_from_memory(make_config, files, tmp_path, num_workers):
    overrides = (
        "tasks=[{name: dim, target: y}, {name: time, type: regression, level: node}]",
        "training.num_epochs=2",
        f"training.num_workers={num_workers}",
    )
    _, from_disk, test_disk = train(config(make_config, files, "disk", *overrides))
    _, from_memory, test_memory = train(
        config(make_config, files, "memory", *overrides, f"training.path={tmp_path}/memory")
    )
    assert numbers(from_disk) == numbers(from_memory) and len(from_disk) == 2
    assert test_disk == test_memory


def train_ranks(rank, world_size, cfg):
    trainer = qg.TrainerDDP(rank, cfg)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return type(trainer.dataset).__name__, history


def test_two_processes_train_from_disk_as_from_memory(make_config, files, tmp_path):
    overrides = ("tasks=[{name: dim, target: y}]", "training.num_epochs=2")
    disk = config(make_config, files, "disk", *overrides, f"training.path={tmp_path}/d")
    memory = config(make_config, files, "memory", *overrides, f"training.path={tmp_path}/m")
    (kind0, disk0), (kind1, disk1) = run_ranks(2, train_ranks, disk)
    (_, memory0), (_, memory1) = run_ranks(2, train_ranks, memory)
    assert kind0 == kind1 == "DiskDataset"
    assert disk0 == disk1 and memory0 == memory1 and len(disk0) == 2
    assert numbers(disk0) == numbers(memory0)


def test_each_rank_reads_only_the_graphs_its_sampler_gives_it(make_config, files, monkeypatch):
    cfg = config(make_config, files, "disk", "training.batch_size=8")
    dataset = dataset_from_config(cfg.data, progress=False)
    train_part, _, _ = split_dataset(dataset, cfg.data.split, cfg.data.seed)
    read: list[int] = []  # every graph read from the table, one at a time or many
    get, multi_get = _Table.get, _Table.multi_get
    monkeypatch.setattr(_Table, "get", lambda self, i: read.append(int(i)) or get(self, i))
    monkeypatch.setattr(
        _Table, "multi_get", lambda self, i, *a: read.extend(map(int, i)) or multi_get(self, i)
    )
    for rank in (0, 1):
        loader = make_train_loader(
            train_part, cfg.training, cfg.augmentation, rank=rank, world_size=2
        )
        loader.sampler.set_epoch(1)
        read.clear()
        for _ in loader:
            pass
        given = [train_part.indices[i] for i in loader.sampler]
        assert sorted(read) == sorted(given) and len(read) == len(train_part) // 2


def test_the_disk_cache_is_rebuilt_when_a_file_changes(make_config, files, tmp_path):
    _, flat = files
    path = tmp_path / "copy.h5"
    path.write_bytes(flat.read_bytes())
    cfg = make_config(f"data.files=[{path}]", TARGETS, "data.storage=disk")
    first = dataset_from_config(cfg.data, progress=False)
    built = os.stat(first.processed_paths[0]).st_mtime_ns
    again = dataset_from_config(cfg.data, progress=False)
    assert again.processed_paths == first.processed_paths
    assert os.stat(again.processed_paths[0]).st_mtime_ns == built  # reused, not rebuilt
    with h5py.File(path, "a") as f:  # one label changes
        f["y"][0] = 1 - f["y"][0]
    changed = dataset_from_config(cfg.data, progress=False)
    assert changed.processed_paths[0] != first.processed_paths[0]
    assert int(changed[0].y) != int(first[0].y)


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_failing_build_leaves_no_table_and_loses_no_cache(make_config, files, world_size):
    good = config(make_config, files, "disk")
    kept = dataset_from_config(good.data, progress=False)
    processed = Path(kept.processed_paths[0]).parent
    before = {p.name: p.stat().st_mtime_ns for p in processed.iterdir()}
    bad = config(make_config, files, "disk", "data.pre_transform=user_data.fail_on_19_elements")
    with pytest.raises(Exception, match="a causal set of 19 elements"):
        DiskDataset(FileSource(bad.data), bad.data.root, progress=False, world_size=world_size)
    after = {p.name: p.stat().st_mtime_ns for p in processed.iterdir()}
    assert after == before  # nothing half-written beside the old cache, which is untouched
    assert_same(dataset_from_config(good.data, progress=False), kept)


def test_several_processes_build_the_same_table_as_one(make_config, files, tmp_path):
    one = config(make_config, files, "disk", "data.pre_filter=user_data.at_least_14_elements")
    two = config(
        make_config,
        files,
        "disk",
        "data.pre_filter=user_data.at_least_14_elements",
        f"data.root={tmp_path / 'two'}",
    )
    built_by_one = DiskDataset(FileSource(one.data), one.data.root, progress=False)
    built_by_two = DiskDataset(FileSource(two.data), two.data.root, world_size=2, progress=False)
    assert 0 < len(built_by_two) < 80
    assert_same(built_by_two, built_by_one)
    assert torch.equal(graph_attribute(built_by_two, "y"), graph_attribute(built_by_one, "y"))
    # pages sized for these rows of a few KiB, not 64 KiB ones copied for each row read
    row = len(built_by_one.db.get(0))
    for dataset in (built_by_one, built_by_two):
        (size,) = dataset.db.cursor.execute("PRAGMA page_size").fetchone()
        assert size == disk_module.page_size(row) < 65536
    assert [disk_module.page_size(n) for n in (10, 5000, 8192, 9000, 10**6)] == [
        4096, 8192, 8192, 16384, 65536,
    ]  # fmt: skip


def test_auto_keeps_small_data_in_memory_and_large_data_on_disk(make_config, files, monkeypatch):
    import QuantumGravPy.data.sources.datasets as datasets

    cfg = config(make_config, files, "auto", "data.targets={y: y}")
    monkeypatch.setattr(datasets, "available_memory", lambda: 10**3)  # too small
    assert isinstance(dataset_from_config(cfg.data, progress=False), DiskDataset)
    monkeypatch.setattr(datasets, "available_memory", lambda: 10**12)
    # a cache already built is used as it is: no second copy in the other storage
    assert isinstance(dataset_from_config(cfg.data, progress=False), DiskDataset)
    fresh = config(make_config, files, "auto", "data.targets={dimension: dimension}")
    assert not isinstance(dataset_from_config(fresh.data, progress=False), DiskDataset)


def test_storage_disk_is_refused_for_a_dataset_of_your_own(make_config):
    with pytest.raises(qg.ConfigError, match="data.storage: disk is for the generated"):
        make_config("data.dataset=user_data.ring_graphs", "data.storage=disk")


def test_qg_generate_builds_a_table_on_disk(make_config, files, tmp_path, capsys):
    cfg = config(make_config, files, "disk", f"data.root={tmp_path / 'cache'}")
    path = write_config(cfg, tmp_path / "disk.yaml")
    result = run_main(capsys, "generate", path)
    assert result.returncode == 0, result.stderr
    assert "80 graphs ready" in result.stdout
    assert len(list((tmp_path / "cache" / "processed").glob("files_*.db"))) == 1


# --- bounded memory ---------------------------------------------------------------------------

LIMIT = 100 * 2**20  # what one epoch may add to the process's resident memory
GRAPHS = 800  # of about half a megabyte each: the processed data is four times LIMIT


def resident() -> tuple[int, int]:
    """(resident memory now, its peak since the last reset), in bytes."""
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def train_one_epoch_measured(rank, world_size, cfg):
    """In a fresh process: build the trainer and its loaders, then reset the peak and train and
    validate one epoch; the peak resident memory above where the epoch started."""
    import matplotlib.pyplot  # noqa: F401  (the run's plots: a fixed cost, not the data's)

    trainer = qg.Trainer(cfg)
    loaders = trainer.prepare_dataloaders()
    start, _ = resident()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the kernel's peak (VmHWM) starts again from now
    history = trainer.run_training(*loaders[:2])
    trainer.close()
    return len(history), resident()[1] - start


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_an_epoch_from_disk_stays_within_a_memory_limit_four_times_smaller_than_the_data(
    make_config, tmp_path
):
    with h5py.File(tmp_path / "index.h5", "w") as f:  # the samples; wide_graph makes each one
        f.create_dataset("adjacency_matrix", data=np.zeros((GRAPHS, 2, 2), dtype=np.uint8))
        f.create_dataset("cset_size", data=np.full(GRAPHS, 2))
    cfg = make_config(
        f"data.files=[{tmp_path / 'index.h5'}]",
        "data.reader=user_data.wide_graph",
        "data.storage=disk",
        f"data.root={tmp_path / 'cache'}",
        "training.num_epochs=1",
        "training.batch_size=16",
        "validation.batch_size=16",
        "model.hidden_channels=8",
    )
    dataset = dataset_from_config(cfg.data, progress=False)  # built here, measured there
    processed = Path(dataset.processed_paths[0]).stat().st_size
    assert processed > 4 * LIMIT
    ((epochs, added),) = run_ranks(1, train_one_epoch_measured, cfg, timeout_s=120)
    assert epochs == 1
    assert added < LIMIT, f"one epoch added {added / 2**20:.0f} MiB to the resident memory"


def test_a_job_shares_a_missing_build_only_when_each_process_gets_enough(
    make_config, files, tmp_path, monkeypatch
):
    import QuantumGravPy.data.storage.disk as disk

    used = []
    real = disk.in_parallel
    monkeypatch.setattr(disk, "in_parallel", lambda fn, w, *a: used.append(w) or real(fn, w, *a))
    few = config(make_config, files, "disk", f"data.root={tmp_path / 'few'}")
    dataset_from_config(few.data, progress=False, world_size=2, min_per_process=50)
    assert used == []  # 80 causal sets: one process builds them
    many = config(make_config, files, "disk", f"data.root={tmp_path / 'many'}")
    shared = dataset_from_config(many.data, progress=False, world_size=2, min_per_process=40)
    assert used == [2]
    assert_same(shared, dataset_from_config(few.data, progress=False))


def test_many_graphs_read_at_once_come_back_in_the_order_asked_repeats_included(
    make_config, files, monkeypatch
):
    dataset = dataset_from_config(config(make_config, files, "disk").data, progress=False)
    monkeypatch.setattr(disk_module, "_IN_QUERY", 7)  # several queries for one batch
    wanted = [5, 3, 5, 0, *range(len(dataset) - 1, 10, -2), 3]
    assert dataset.db.multi_get(wanted) == [dataset.db.get(i) for i in wanted]


def test_what_is_kept_beside_the_table_collates_as_pyg_collates_the_light_graphs():
    """The per-graph values kept in memory for samplers and tasks (built in parts, joined in
    order) are what ``InMemoryDataset.collate`` makes of them: graph-level numbers, 0-dim
    tensors and per-node vectors, with each graph's slice."""
    from torch_geometric.data import Data, InMemoryDataset

    from QuantumGravPy.data.storage.disk import Kept

    graphs = [
        Data(
            x=torch.ones(n, 2),
            edge_index=torch.zeros(2, 0, dtype=torch.long),
            y=torch.tensor([n % 3]),
            w=torch.tensor(float(n)),
            t=torch.arange(n).float(),
        )
        for n in range(1, 300)
    ]
    first, second = Kept(), Kept()
    for g in graphs[:150]:
        first.add(g)
    for g in graphs[150:]:
        second.add(g)
    first.extend(second)
    values, slices = first.collate()
    light = [Data(y=g.y, w=g.w, t=g.t) for g in graphs]
    expected, expected_slices = InMemoryDataset.collate(light)
    assert len(first) == len(graphs) and sorted(slices) == [
        "qg_num_edges",
        "qg_num_nodes",
        "t",
        "w",
        "y",
    ]
    # training.batch_nodes packs by it
    assert values["qg_num_nodes"].tolist() == [g.num_nodes for g in graphs]
    for key in ("y", "w", "t"):
        assert torch.equal(values[key], expected[key]) and values[key].dtype == expected[key].dtype
        assert torch.equal(slices[key], expected_slices[key])
    odd = Kept()
    odd.add(graphs[0])
    with pytest.raises(qg.DataError, match="graph 1 has the attributes t, y, the first graph t, w"):
        odd.add(Data(x=torch.ones(1, 2), y=torch.tensor([0]), t=torch.zeros(1)))


def test_sets_of_one_element_are_stored_on_disk(make_config):
    """A 1-element sprinkling's time is a column of its one coordinate row: a tensor of one
    element with its matrix's stride, stored as bytes like any other."""
    cfg = make_config("data.num_points=[1, 3]", "data.dimensions=[2]", "data.num_graphs=12",
                      "data.storage=disk")  # fmt: skip
    dataset = qg.data.dataset_from_config(cfg.data, progress=False)
    assert type(dataset).__name__ == "DiskDataset"
    assert sorted({dataset[i].num_nodes for i in range(len(dataset))}) == [1, 2, 3]
