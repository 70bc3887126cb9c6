"""An epoch's batches are gathered in one pass at its start, of only the attributes the model
and the tasks read, and the training that follows is the one that gathered every attribute of
each batch anew each step, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import run_ranks, train
from test_batching import GENERATED, Faces, FacesSource, assert_same_batch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Batch

import QuantumGravPy as qg
from QuantumGravPy.data import CausalSetDataset
from QuantumGravPy.data.batches import loaders
from QuantumGravPy.data.batches.batching import IndexBatcher
from QuantumGravPy.data.storage.disk import DiskDataset
from QuantumGravPy.training.loop import trainer as trainer_module

DEVICES = pytest.mark.parametrize(
    "device", [None, torch.device("cpu")], ids=["numpy", "torch-on-a-device"]
)
BATCHES = [[5], [11, 0, 3, 3, 7], list(range(12))[::-1], [2, 9]]


class Ops(TorchDispatchMode):
    """Counts the aten operations dispatched that are not views (what a GPU launches)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@DEVICES
def test_batches_gathered_in_one_pass_are_the_batches_collated_one_by_one(device):
    """Shifted attributes of every shape (``face`` [3, k], ``extra_index`` [2, k]), per-graph
    rows and matrices, dtypes NumPy lacks: each batch of a pass is PyG's collation of its graphs,
    its tensors contiguous views of the pass's."""
    dataset = Faces()
    batcher = IndexBatcher(dataset, device)
    made = batcher.many(BATCHES)
    for batch, indices in zip(made, BATCHES, strict=True):
        assert_same_batch(batch, Batch.from_data_list([dataset[i] for i in indices]))
        assert all(value.is_contiguous() for value in batch.to_dict().values())
    assert made[1].x.untyped_storage().data_ptr() == made[2].x.untyped_storage().data_ptr()


@DEVICES
def test_a_batcher_told_what_is_read_gathers_nothing_else(device):
    dataset = Faces()
    batcher = IndexBatcher(dataset, device, reads={"x", "edge_index", "y"})
    for batch, indices in zip(batcher.many(BATCHES), BATCHES, strict=True):
        assert set(batch.keys()) == {"x", "edge_index", "y", "batch", "ptr"}
        whole = Batch.from_data_list([dataset[i] for i in indices])
        for key in ("x", "edge_index", "y", "batch", "ptr"):
            assert torch.equal(batch[key], whole[key]), key
        assert [set(g.keys()) for g in batch.to_data_list()] == [{"x", "edge_index", "y"}] * len(
            indices
        )


def test_batches_on_disk_hold_what_is_read_alone(tmp_path):
    dataset = DiskDataset(FacesSource(), str(tmp_path), progress=False)
    batches = loaders.index_batches(dataset, reads={"edge_index", "y", "mass"})
    whole = loaders.index_batches(dataset)
    for indices in BATCHES:
        batch, reference = batches.batcher(indices), whole.batcher(indices)
        kept = {"x", "edge_index", "y", "mass", "batch", "ptr"}  # x counts the nodes
        assert list(batch.to_dict()) == [key for key in reference.to_dict() if key in kept]
        for key in batch.keys():
            assert torch.equal(batch[key], reference[key]), key


def _loader(tmp_path, make_config, device, extra):
    dataset = CausalSetDataset(
        str(tmp_path), **{**GENERATED, "num_graphs": 60}, kind="ricci", progress=False
    )
    config = make_config("training.batch_size=2", *extra)
    reads = {"x", "edge_index", "y"}
    return loaders.make_train_loader(
        dataset, config.training, config.augmentation, device=device, reads=reads
    )


@DEVICES
@pytest.mark.parametrize(
    "extra",
    [(), ("training.batch_nodes=40",), ("training.sampler=class_balanced",)],
    ids=["shuffle", "batch_nodes", "sampler"],
)
def test_an_epoch_is_gathered_once_and_dispatches_almost_nothing_a_step(
    tmp_path, make_config, monkeypatch, device, extra
):
    """The whole epoch in one pass; with ``data.device`` (the torch path) it costs a handful of
    operations for all its steps, where a gather each step cost some 19 a step."""
    loader = _loader(tmp_path, make_config, device, extra)
    passes = []
    many = IndexBatcher.many
    monkeypatch.setattr(
        IndexBatcher, "many", lambda self, b, **k: passes.append(len(b)) or many(self, b, **k)
    )
    counter = Ops()
    with counter:
        batches = list(loader)
    assert passes == [len(batches)] and len(batches) >= 20
    assert counter.count / len(batches) < 2, f"{counter.count} operations for {len(batches)}"
    assert all(set(b.keys()) == {"x", "edge_index", "y", "batch", "ptr"} for b in batches)


def test_what_each_model_reads_is_what_its_training_batches_hold(make_config, tmp_path):
    """The built-in model says what it reads; a model of one's own may say so (``model.reads``
    or an attribute), and otherwise gets every attribute, as do the evaluation loaders."""
    base = ["training.num_epochs=1"]
    held = {}
    for name, extra in {
        "built-in": [],
        "graph features": ["model.graph_features=[h]"],
        "own, silent": ["model={type: user_models.SmallGCN}"],
        "own, told": ["model={type: user_models.SmallGCN, reads: [x, edge_index]}"],
    }.items():
        trainer = qg.Trainer(make_config(*base, *extra, f"training.path={tmp_path / name}"))
        train_loader, val_loader, _ = trainer.prepare_dataloaders()
        held[name] = set(next(iter(train_loader)).keys())
        assert len(next(iter(val_loader)).keys()) > len(held[name]) or name == "own, silent"
        trainer.close()
    assert held["built-in"] == {"x", "edge_index", "y", "batch", "ptr"}
    assert held["graph features"] == held["built-in"] | {"h"}
    assert held["own, told"] == held["built-in"]
    assert {"pos", "ricci"} <= held["own, silent"]


def test_batches_made_for_another_trainer_are_refused_naming_the_missing_target(
    make_config, tmp_path
):
    one = qg.Trainer(make_config(f"training.path={tmp_path / 'one'}"))
    batches = list(one.prepare_dataloaders()[0])
    one.close()
    task = "tasks=[{name: h, type: regression, level: graph, target: h}]"
    other = qg.Trainer(make_config(task, f"training.path={tmp_path / 'other'}"))
    other.prepare_dataloaders()
    with pytest.raises(qg.DataError, match="task 'h': the batch has no target 'h'"):
        other.train_epoch(batches)
    other.close()


def test_model_reads_is_for_a_model_of_ones_own(make_config):
    with pytest.raises(qg.ConfigError, match="model.reads: only for your own model.type"):
        make_config("model.reads=[x]")


def _trained(make_config, path, old_path: bool, *extra: str):
    config = make_config(f"training.path={path}", "training.num_epochs=2", *extra)
    if old_path:  # each batch gathered alone, every attribute: the step as it was
        with pytest.MonkeyPatch.context() as mp:
            _as_it_was(mp)
            trainer, history, metrics = train(config)
    else:
        trainer, history, metrics = train(config)
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    return history, metrics, weights, _predictions(path)


def _predictions(path) -> dict:
    with np.load(path / "test_predictions.npz") as saved:
        return {name: saved[name] for name in saved.files}


def _as_it_was(mp) -> None:
    mp.setattr(loaders, "PASS_BYTES", 0)
    reads = trainer_module.train_reads
    mp.setattr(trainer_module, "train_reads", lambda *a: {**reads(*a), "reads": None})


def _same(a, b) -> None:
    (history_a, metrics_a, weights_a), (history_b, metrics_b, weights_b) = a[:3], b[:3]
    drop = ("epoch_seconds", "samples_per_second")
    strip = [{k: v for k, v in row.items() if k not in drop} for row in history_a]
    assert strip == [{k: v for k, v in row.items() if k not in drop} for row in history_b]
    assert metrics_a == metrics_b
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("data_device", ["cpu", "torch-on-a-device"])
def test_one_process_trains_as_it_did_to_the_bit(make_config, tmp_path, monkeypatch, data_device):
    """The shipped config, as it trained with a gather of every attribute each step: the same
    history, test metrics, predictions and weights."""
    if data_device != "cpu":  # data.device's path, on the CPU: gathered with torch operations
        monkeypatch.setattr(trainer_module, "batch_device", lambda *a: torch.device("cpu"))
    now = _trained(make_config, tmp_path / "now", False)
    before = _trained(make_config, tmp_path / "before", True)
    _same(now, before)
    _same_predictions(now[3], before[3])


def _same_predictions(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    assert all(np.array_equal(a[k], b[k]) for k in a)


def _rank(rank: int, world_size: int, config, old_path: bool):
    if old_path:
        _as_it_was(pytest.MonkeyPatch())  # a process of its own: nothing to undo
    trainer = qg.TrainerDDP(rank, config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    metrics = trainer.run_test(test_loader)
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()
    return history, metrics, weights


@pytest.mark.timeout(300)
def test_two_processes_train_as_they_did_to_the_bit(make_config, tmp_path):
    runs = []
    for name, old_path in (("now", False), ("before", True)):
        config = make_config(
            f"training.path={tmp_path / name}", "training.num_epochs=2", "parallel.world_size=2"
        )
        runs.append(run_ranks(2, _rank, config, old_path, timeout_s=240))
    now, before = runs
    for a, b in zip(now, before, strict=True):
        _same(a, b)
    _same_predictions(*(_predictions(tmp_path / name) for name in ("now", "before")))
