"""Batches assembled by index arithmetic are the batches PyTorch Geometric collates, attribute
for attribute, for every embedded kind and for the user's files."""

from dataclasses import replace

import pytest
import torch
from conftest import assert_refused, run_main, train
from torch.utils.data import Subset
from torch_geometric.data import Batch, Data, InMemoryDataset

from QuantumGravPy.data import CausalSetDataset
from QuantumGravPy.data.batches import loaders
from QuantumGravPy.data.batches import row_batches as rows_module
from QuantumGravPy.data.batches.assembly import Unbatchable
from QuantumGravPy.data.batches.batching import IndexBatcher
from QuantumGravPy.data.batches.loaders import (
    batch_device,
    make_loader,
    make_train_loader,
    split_dataset,
)
from QuantumGravPy.data.batches.row_batches import DiskBatcher
from QuantumGravPy.data.sources.datasets import dataset_from_config
from QuantumGravPy.data.sources.files import FileDataset
from QuantumGravPy.data.sources.kinds import kind_names
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.data.storage.disk import DiskDataset
from QuantumGravPy.errors import ConfigError, DataError

GENERATED = {"num_graphs": 30, "num_points": [8, 20], "dimensions": [2, 3], "seed": 5}


def assert_same_batch(ours: Batch, theirs: Batch) -> None:
    assert type(ours).__name__ == type(theirs).__name__
    assert list(ours.to_dict()) == list(theirs.to_dict())  # the same attributes, in order
    for key in theirs.to_dict():
        a, b = ours[key], theirs[key]
        assert a.dtype == b.dtype and torch.equal(a, b), key
    assert ours.num_graphs == theirs.num_graphs and ours.num_nodes == theirs.num_nodes
    for book in ("_slice_dict", "_inc_dict"):
        mine, reference = getattr(ours, book), getattr(theirs, book)
        assert mine.keys() == reference.keys()
        for key in reference:
            assert torch.equal(mine[key], reference[key]), (book, key)
    for g, r in zip(ours.to_data_list(), theirs.to_data_list(), strict=True):
        assert all(torch.equal(g[k], r[k]) for k in r.keys())


INDICES = [[0], [3, 1, 4, 1, 5], list(range(30)), [29, 0, 17, 17, 2, 11, 8]]


DEVICES = pytest.mark.parametrize(
    "device", [None, torch.device("cpu")], ids=["numpy", "torch-on-a-device"]
)


@DEVICES
@pytest.mark.parametrize("kind", kind_names())
def test_every_embedded_kind_batches_as_pytorch_geometric_collates(tmp_path_factory, kind, device):
    dataset = CausalSetDataset(
        str(tmp_path_factory.mktemp("kinds")), **GENERATED, kind=kind, progress=False
    )
    batcher = IndexBatcher(dataset, device)
    for indices in INDICES:
        assert_same_batch(batcher(indices), Batch.from_data_list([dataset[i] for i in indices]))


def test_causal_sets_from_files_with_node_features_batch_as_collated(make_config, tmp_path):
    generated = make_config(
        f"data.root={tmp_path / 'cache'}",
        "data.num_graphs=30",
        "data.num_points=[8, 20]",
        "data.dimensions=[2, 3]",
    )
    path = write_embedded(generated.data, tmp_path / "sets.zarr")
    files = make_config(
        f"data.files=[{path}]",
        f"data.root={tmp_path / 'files'}",
        "data.targets={y: y, dimension: dimension, time: time}",
        "data.node_features=[time]",
    )
    dataset = FileDataset(files.data, progress=False)
    assert len(dataset) == 30 and dataset[0].x.shape[1] == 1  # the features: the time alone
    batcher = IndexBatcher(dataset)
    for indices in INDICES:
        assert_same_batch(batcher(indices), Batch.from_data_list([dataset[i] for i in indices]))


class Faces(InMemoryDataset):
    """Graphs with an attribute of their own that Data shifts by the node count (``face``),
    one stored per node row-wise (``extra_index`` of shape [2, k]), a matrix per graph, and
    dtypes NumPy does not have (bfloat16) or that it stores otherwise (bool)."""

    def __init__(self):
        super().__init__(None)
        g = torch.Generator().manual_seed(0)
        graphs = []
        for i in range(12):
            n = 3 + i % 5
            graphs.append(
                Data(
                    x=torch.randn(n, 2, generator=g),
                    edge_index=torch.randint(0, n, (2, 2 * n), generator=g),
                    face=torch.randint(0, n, (3, i + 1), generator=g),
                    extra_index=torch.randint(0, n, (2, 1 + i % 3), generator=g),
                    weight=torch.rand(n, 3, generator=g).double(),
                    y=torch.tensor([i % 3]),
                    target=torch.rand(1, 4, generator=g),
                    mass=torch.rand(n, generator=g).bfloat16(),
                    flag=torch.tensor([i % 2 == 0]),
                    charge=torch.rand(1, generator=g).bfloat16(),
                )
            )
        self.data, self.slices = self.collate(graphs)


@DEVICES
def test_attributes_of_a_users_own_graphs_are_shifted_and_gathered_alike(device):
    dataset = Faces()
    batcher = IndexBatcher(dataset, device)
    for indices in ([5], [11, 0, 3, 3, 7], list(range(12))[::-1]):
        assert_same_batch(batcher(indices), Batch.from_data_list([dataset[i] for i in indices]))


class FacesSource:
    """The same graphs as a source of the disk storage."""

    prefix, params, total = "faces", {"graphs": 12}, 12

    def graphs(self, start, end, *, progress):
        return iter(Faces()[start:end])

    def rejected_all(self):
        return "none left"


@pytest.mark.parametrize("large", [False, True], ids=["by-index", "by-slices"])
def test_a_users_own_graphs_from_disk_are_gathered_alike_whatever_their_dtypes(
    tmp_path, monkeypatch, large
):
    """Every dtype size the disk batcher reads in units of (bool, bfloat16, float32, float64,
    int64, complex128 as two units) and attributes concatenated along their last axis; batches
    of small graphs gathered by one index, those of large ones slice by slice."""
    if large:
        monkeypatch.setattr(rows_module, "_INDEXED", 0)

    class Complex(FacesSource):
        prefix = "complex"

        def graphs(self, start, end, *, progress):
            for graph in super().graphs(start, end, progress=progress):
                graph.phase = torch.polar(graph.weight, graph.weight)  # complex128, per node
                yield graph

    class Mixed(FacesSource):  # graphs that differ in a dtype: PyG's collation serves them
        prefix = "mixed"

        def graphs(self, start, end, *, progress):
            for i, graph in enumerate(super().graphs(start, end, progress=progress), start):
                if i % 2:
                    graph.weight = graph.weight.float()
                yield graph

    for source in (FacesSource(), Complex(), Mixed()):
        dataset = DiskDataset(source, str(tmp_path), progress=False)
        batcher = DiskBatcher(dataset)
        for indices in ([5], [11, 0, 3, 3, 7], list(range(12))[::-1]):
            assert_same_batch(batcher(indices), Batch.from_data_list([dataset[i] for i in indices]))


def test_what_it_cannot_assemble_is_refused_for_the_per_graph_path(tmp_path):
    dataset = CausalSetDataset(str(tmp_path), **GENERATED, progress=False)
    dataset.transform = lambda graph: graph
    with pytest.raises(Unbatchable, match="transform"):
        IndexBatcher(dataset)
    with pytest.raises(Unbatchable, match="in-memory"):
        IndexBatcher([Data(x=torch.ones(2, 1))])
    with pytest.raises(ValueError, match="non-empty"):
        IndexBatcher(CausalSetDataset(str(tmp_path), **GENERATED, progress=False))([])


# --- whole epochs through the loaders: the same batches as PyTorch Geometric's loader --------


def epoch_batches(loader, epoch: int) -> list[Batch]:
    for part in (loader.sampler, loader.dataset):
        if hasattr(part, "set_epoch"):
            part.set_epoch(epoch)
    return list(loader)


def every_loader(config, train, val, rank: int, world_size: int, device=None) -> list:
    shard = Subset(val, range(rank, len(val), world_size))  # sharded validation's part
    label = {"manifold_like": "manifold_like"}.get(config.data.kind, "y")
    return [
        make_train_loader(
            train, config.training, config.augmentation, rank=rank, world_size=world_size,
            label=label, device=device,
        ),
        make_loader(shard, batch_size=7, num_workers=config.training.num_workers, device=device),
        make_loader(val, batch_size=5, shuffle=True, seed=3, device=device),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["training.sampler=class_balanced", "training.drop_last=true"],
        ["training.sampler=progressive", "data.kind=manifold_like"],
        ["data.kind=curvature", "training.num_workers=1"],  # per element ricci; a worker
        ["data.storage=disk"],
        ["data.storage=disk", "data.kind=curvature", "training.sampler=class_balanced"],
        ["data.dataset=user_data.imbalanced_rings_in_memory", "training.sampler=weighted"],
    ],
    ids=[
        "shuffle",
        "class-balanced",
        "progressive",
        "node-level-in-a-worker",
        "disk",
        "disk-node-level",
        "weighted",
    ],
)
@pytest.mark.parametrize("world_size", [1, 2])
def test_whole_epochs_are_the_batches_pytorch_geometric_makes(
    make_config, monkeypatch, overrides, world_size
):
    assert_same_epochs(make_config, monkeypatch, overrides, world_size)


@pytest.mark.parametrize(
    "overrides",
    [
        ["data.storage=memory", "training.sampler=class_balanced"],
        ["data.storage=memory", "data.kind=curvature", "data.dimensions=[2]"],
    ],
    ids=["graph-level", "node-level"],
)
@pytest.mark.parametrize("world_size", [1, 2])
def test_batches_gathered_with_torch_as_on_a_gpu_are_the_same(
    make_config, monkeypatch, overrides, world_size
):
    """The path data.device: cuda takes (the dataset's tensors on the device, each batch
    gathered there with torch operations), here run on the host's device."""
    assert_same_epochs(make_config, monkeypatch, overrides, world_size, torch.device("cpu"))


def assert_same_epochs(make_config, monkeypatch, overrides, world_size, device=None):
    config = make_config("data.num_graphs=60", "training.batch_size=8", *overrides)
    dataset = dataset_from_config(config.data, progress=False)
    train, val, _ = split_dataset(dataset, config.data.split, config.data.seed)
    for rank in range(world_size):
        ours = every_loader(config, train, val, rank, world_size, device)
        if device is not None:
            assert all(loader.dataset.batcher.device == device for loader in ours)
        with monkeypatch.context() as m:
            m.setattr(loaders, "index_batches", lambda *a: None)  # per graph
            reference = every_loader(config, train, val, rank, world_size)
        assert all(isinstance(loader.dataset, loaders.IndexBatches) for loader in ours)
        for mine, theirs in zip(ours, reference, strict=True):
            assert len(mine) == len(theirs)
            for epoch in (0, 1):
                batches, expected = epoch_batches(mine, epoch), epoch_batches(theirs, epoch)
                assert len(batches) == len(expected) > 0
                for a, b in zip(batches, expected, strict=True):
                    assert_same_batch(a, b)
            loaders.release_workers(mine)
            loaders.release_workers(theirs)


# --- data.device: where batches are assembled ---------------------------------------------------


def test_data_device_puts_a_dataset_on_the_gpu_only_when_nothing_rules_it_out(
    make_config, monkeypatch
):
    """The decision, with a GPU's free memory set by the test (the batches themselves are
    checked on a GPU by the tests marked gpu)."""
    gpu = torch.device("cuda", 0)
    dataset = dataset_from_config(make_config("data.num_graphs=30").data, progress=False)
    size = sum(v.numel() * v.element_size() for v in dataset._data.to_dict().values())
    free = {"bytes": 10 * size}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free["bytes"], 10**12))

    def where(*overrides, data=dataset, device=gpu):
        c = make_config("data.num_graphs=30", *overrides)
        return batch_device(c.data, c.training, c.augmentation, device, data)

    assert where() == gpu and where("data.device=cuda") == gpu  # auto: it takes a tenth
    assert where("data.device=cpu") is None
    assert where("data.device=cuda", device=torch.device("cpu")) is None
    free["bytes"] = 3 * size  # more than a quarter of what is free: auto keeps it on the host
    assert where() is None and where("data.device=cuda") == gpu
    free["bytes"] = size // 2
    with pytest.raises(DataError, match=r"data.device: cuda: the processed dataset takes .* free"):
        where("data.device=cuda")
    free["bytes"] = 10 * size
    for overrides, named in [
        (["training.num_workers=1"], "training.num_workers: 1"),
        (["augmentation.preset=mild"], "augmentation.preset"),
    ]:
        assert where(*overrides) is None
        with pytest.raises(ConfigError, match=f"data.device: cuda cannot .* {named}"):
            where("data.device=cuda", *overrides)
    disk = dataset_from_config(make_config("data.storage=disk").data, progress=False)
    assert where(data=disk) is None
    with pytest.raises(ConfigError, match="data.storage: disk"):
        where("data.device=cuda", data=Subset(disk, [0, 1]))
    dataset.transform = lambda graph: graph
    with pytest.raises(ConfigError, match="transform"):
        where("data.device=cuda")


def test_data_device_cuda_with_disk_storage_is_refused_at_the_command_line(capsys, tmp_path):
    result = run_main(
        capsys, "train", "configs/train.yaml", "data.device=cuda", "data.storage=disk",
        f"training.path={tmp_path / 'run'}",
    )  # fmt: skip
    assert_refused(result, "data.device: cuda", "data.storage: disk")
    assert not (tmp_path / "run").exists()


def test_without_a_gpu_data_device_cuda_is_accepted_and_means_cpu(make_config):
    trainer, history, metrics = train(make_config("data.device=cuda", "training.num_epochs=1"))
    assert trainer.batch_device is None and trainer.device.type == "cpu"
    assert len(history) == 1 and metrics


NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("kind", ["dimension", "ricci"])
def test_on_a_gpu_batches_are_gathered_there_as_pytorch_geometric_collates(tmp_path, kind):
    gpu = torch.device("cuda", torch.cuda.current_device())
    dataset = CausalSetDataset(str(tmp_path), **GENERATED, kind=kind, progress=False)
    batcher = IndexBatcher(dataset, gpu)
    for indices in INDICES:
        ours = batcher(indices)
        theirs = Batch.from_data_list([dataset[i].to(gpu) for i in indices])
        assert all(value.device == gpu for value in ours.to_dict().values())
        assert_same_batch(ours, theirs)
    # the three loaders of a run share one copy of the dataset on the GPU
    again = IndexBatcher(dataset, gpu)
    assert again.stored[0].values.data_ptr() == batcher.stored[0].values.data_ptr()


@pytest.fixture
def deterministic_gpu(monkeypatch):
    """CUDA's deterministic kernels for the test (its scatter-adds otherwise add in the order
    their atomics land, and two runs of the same training differ in the last bits)."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_data_device_cuda_trains_with_batches_made_there(
    make_config, tmp_path, deterministic_gpu
):
    trainer, history, _ = train(
        make_config("training.device=cuda", "data.device=cuda", "training.num_epochs=2")
    )
    assert trainer.batch_device is not None and trainer.batch_device.type == "cuda"
    for loader in trainer.loaders:
        batch = next(iter(loader))
        assert batch.x.is_cuda and batch.edge_index.is_cuda and batch.batch.is_cuda
    on_host = ("training.device=cuda", "data.device=cpu", "training.num_epochs=2")
    reference, expected, _ = train(make_config(*on_host, f"training.path={tmp_path / 'host'}"))
    assert reference.batch_device is None
    # the same batches through the same kernels: the same bits
    assert [h["train_loss"] for h in history] == [h["train_loss"] for h in expected]
    assert [h["val_loss"] for h in history] == [h["val_loss"] for h in expected]


def test_workers_on_a_cpu_run_are_warned_about_before_training(make_config):
    from QuantumGravPy.training.loop.notices import start_notices

    dataset = dataset_from_config(make_config("data.num_graphs=30").data, progress=False)

    def notices(*overrides):
        return start_notices(
            make_config(*overrides), dataset, train_graphs=21, device=torch.device("cpu")
        )

    assert not any("num_workers" in n for n in notices())
    (notice,) = [n for n in notices("training.num_workers=2") if "num_workers" in n]
    assert notice.startswith("training.num_workers: 2 worker process(es) compete for the CPU")
    assert "(docs: Data, the data path)" in notice


def test_a_batch_from_a_worker_crosses_in_one_buffer_and_is_the_same_batch():
    """What a worker hands over: every tensor of the batch, the bookkeeping included, in one
    shared buffer; made again, the batch PyTorch Geometric collates."""
    from QuantumGravPy.data.batches.transfer import Packed, pack, unpack

    dataset = Faces()
    indices = [11, 0, 3, 3, 7]
    expected = Batch.from_data_list([dataset[i] for i in indices])
    for batch in (IndexBatcher(dataset)(indices), Batch.from_data_list(list(dataset[indices]))):
        packed = pack(batch)
        assert isinstance(packed, Packed) and packed.buffer.dtype == torch.uint8
        # the buffer is the only tensor that crosses: the entries name places in it
        assert not any(isinstance(value, torch.Tensor) for _, _, value in packed.entries)
        assert_same_batch(unpack(packed), expected)
    assert unpack(pack([1, 2])) == [1, 2]  # anything else as it is


@pytest.mark.parametrize("augmented", [False, True])
def test_workers_hand_over_the_batches_the_main_process_makes(make_config, augmented):
    overrides = ["data.num_graphs=40", "data.storage=memory"]
    if augmented:
        overrides.append("augmentation.preset=moderate")
    config = make_config(*overrides)
    dataset = dataset_from_config(config.data, progress=False)
    train, _, _ = split_dataset(dataset, config.data.split, config.data.seed)
    main, worker = (
        make_train_loader(train, replace(config.training, num_workers=n), config.augmentation)
        for n in (0, 1)
    )
    for epoch in (0, 1):
        pairs = zip(epoch_batches(main, epoch), epoch_batches(worker, epoch), strict=True)
        for ours, handed_over in pairs:
            assert_same_batch(handed_over, ours)
    loaders.release_workers(worker)


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_loader_without_workers_draws_as_torchs_dataloader(shuffle):
    """The same batches in the same order, and the same random states after an epoch (torch's
    iterator draws a seed from the loader's generator, or the global one, at each epoch)."""
    from torch.utils.data import DataLoader

    from QuantumGravPy.data.batches.transfer import BatchLoader

    dataset = Faces()

    def options():  # each loader its own generator, seeded alike
        made = {"batch_size": 5, "shuffle": shuffle, "collate_fn": Batch.from_data_list}
        return {**made, "generator": torch.Generator().manual_seed(3)} if shuffle else made

    ours, theirs = BatchLoader(dataset, **options()), DataLoader(dataset, **options())
    for _ in range(2):
        torch.manual_seed(9)
        mine = list(ours)
        state = torch.get_rng_state()
        torch.manual_seed(9)
        expected = list(theirs)
        assert torch.equal(state, torch.get_rng_state())
        assert len(mine) == len(expected) == 3
        for a, b in zip(mine, expected, strict=True):
            assert_same_batch(a, b)
    if shuffle:
        assert torch.equal(ours.generator.get_state(), theirs.generator.get_state())


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_batches_are_assembled_several_in_a_row_within_a_bound(tmp_path, monkeypatch, storage):
    """Without workers, the loader gathers an epoch's batches in memory in one pass (in passes
    of at most PASS_BYTES when it is larger), and on disk up to READ_AHEAD batches in a row
    (their rows read in one query), fewer when they would take more than READ_AHEAD_BYTES: the
    same batches, in the same order, with the same random states, as torch's own loader."""
    from torch.utils.data import DataLoader

    if storage == "memory":
        dataset = Faces()
    else:
        dataset = DiskDataset(FacesSource(), str(tmp_path), progress=False)
    queries = []
    if storage == "disk":
        multi_get = dataset.db.multi_get
        monkeypatch.setattr(
            dataset.db, "multi_get", lambda i: queries.append(len(i)) or multi_get(i)
        )
    batches = loaders.index_batches(dataset)
    made = []
    batcher = type(batches.batcher)
    many = batcher.many
    monkeypatch.setattr(
        batcher, "many", lambda self, c, **k: made.append(len(c)) or many(self, c, **k)
    )
    options = {"batch_size": 1, "shuffle": True, "collate_fn": loaders._as_is}
    ours = make_loader(batches, batch_size=1, shuffle=True, seed=3)
    theirs = DataLoader(batches, generator=torch.Generator().manual_seed(3), **options)
    mine = list(ours)
    if storage == "memory":
        assert made == [12]  # the epoch's 12 batches in one pass
    else:
        assert made == queries == [1, 8, 3]  # the first alone, then at most 8 of the 12
    queries.clear()
    expected = list(theirs)
    for a, b in zip(mine, expected, strict=True):
        assert_same_batch(a, b)
    assert torch.equal(ours.generator.get_state(), theirs.generator.get_state())
    one = sum(v.nbytes for v in mine[0].to_dict().values() if torch.is_tensor(v))
    # about three of them at once
    monkeypatch.setattr(
        loaders, "PASS_BYTES" if storage == "memory" else "READ_AHEAD_BYTES", 3 * one
    )
    made.clear()
    assert len(list(make_loader(batches, batch_size=1))) == 12
    assert max(made) <= 4 and sum(made) == 12 and len(made) >= 4
