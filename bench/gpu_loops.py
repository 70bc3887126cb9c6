"""The loops of `bench/gpu.py` (and of `bench/step.py`): what each contender runs for one epoch.

Each takes a model and its optimizer (deep copies of the cell's), the device and the precision,
and returns a function that trains one epoch. `LOOPS` names them as the report shows them.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402

# The loops, in the order of a cell's rows (and of its rounds).
LOOPS = {
    "qg": "`qg.Trainer`",
    "qg-padded": "`qg.Trainer`, padded",
    "hand": "hand-written, fastest",
    "qg-list": "`qg.Trainer`, pre-made list",
    "hand-work": "hand-written, qg's work",
    "hand-own": "hand-written, same work, own data",
    "pyg": "common PyG loop",
    "lightning": "Lightning",
    "lightning-work": "Lightning, same work",
}
DATA = {"device": "on the device", "host": "on the host"}


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class Batches:
    """A list of batches as one iterable (Lightning reads a plain list as a list of loaders)."""

    def __init__(self, items: list):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class First:
    """The first ``n`` batches of one pass of ``loader``, as an epoch of ``train_epoch``."""

    def __init__(self, loader, n: int):
        self.loader, self.n = loader, n

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.n)

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name: str) -> Any:  # what the trainer reads of its loader's plan
        return getattr(self.loader, name)


def training_indices(dataset, config) -> list[int]:
    """The graphs of ``dataset`` that qg.Trainer trains on (its training split)."""
    train_set, _, _ = qg.data.split_dataset(dataset, config.data.split, config.data.seed)
    return list(train_set.indices)


def training_graphs(dataset, config) -> list:
    """The training split of ``dataset`` (as qg.Trainer splits it), as a list of its graphs."""
    return [dataset[i] for i in training_indices(dataset, config)]


def hand_written(model, optimizer, device, precision: str, on_host: bool):
    """The fastest loop one would write by hand: nothing read on the host, the loss summed on
    the device; host batches (pinned) are copied without waiting."""

    def train(batches) -> torch.Tensor:
        model.train()
        total = torch.zeros((), device=device)
        for batch in batches:
            if on_host:
                batch = batch.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        return total

    return train


def _work_epoch(model, optimizer, params, device, precision: str, batches, n) -> torch.Tensor:
    """The first ``n`` steps of ``batches`` (all: None) with qg's work per step: the loss and
    the right answers summed on the device in float64, and the global gradient norm."""
    model.train()
    sums = torch.zeros(4, dtype=torch.float64, device=device)
    for batch in itertools.islice(batches, n):
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            out = model(batch)
            loss = torch.nn.functional.cross_entropy(out, batch.y)
        loss.backward()
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params])))
        optimizer.step()
        graphs = batch.num_graphs
        sums[0].add_(loss.detach(), alpha=graphs)
        sums[1].add_((out.detach().argmax(dim=-1) == batch.y).sum())
        sums[2].add_(graphs)
        sums[3].add_(norm)
    return sums


def hand_same_work(model, optimizer, device, precision: str, loader):
    """The hand-written loop doing the work of qg's step: its batches made each step by the
    trainer's own loader (shuffled; gathered on the GPU with data on the device, else copied in
    one pinned buffer a step ahead), the loss and the right answers summed on the device in
    float64, and the global gradient norm taken (summed for its mean), with nothing read on
    the host. What it leaves out of qg's step: the non-finite check's bookkeeping, the masked
    update, progress, timing marks and the checks of the model's outputs."""
    params = list(model.parameters())
    float_dtype = torch.float32

    def train(n: int | None = None) -> torch.Tensor:
        return _work_epoch(
            model, optimizer, params, device, precision, qg.data.fed(loader, device, float_dtype), n
        )

    return train


class OwnBatches:
    """The training graphs of an in-memory dataset, reshuffled and gathered by hand, as a
    performance engineer would write it without qg's loader: each epoch's order a
    ``torch.randperm`` with a generator seeded by the epoch; each batch's rows of the
    dataset's concatenated storage (``x``, ``edge_index`` shifted by the nodes' offsets in the
    batch, the batch vector, ``y``) found on the host in NumPy from the storage's slices, and
    taken in one index per attribute. ``on_host``: the storage stays on the host, each batch
    is gathered there and copied over (pinned, without waiting, on a GPU); else the storage is
    moved to ``device`` once and each batch gathered there, only its indices crossing (one
    pinned copy). Only what the model and the loss read is gathered."""

    def __init__(self, dataset, indices, batch_size: int, device: torch.device, on_host: bool):
        data, slices = dataset._data, dataset.slices  # an InMemoryDataset's storage
        self.device, self.batch_size = device, batch_size
        self.where = torch.device("cpu") if on_host else device
        self.pin = device.type == "cuda"
        self.x = data.x.to(self.where, torch.float32)
        self.edge_index = data.edge_index.to(self.where)
        self.y = data.y.to(self.where)
        self.nodes = slices["x"].numpy()
        self.edges = slices["edge_index"].numpy()
        self.indices = np.asarray(indices, dtype=np.int64)
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def __iter__(self):
        """One epoch: the next epoch's order, batch by batch."""
        self.epoch += 1
        generator = torch.Generator().manual_seed(self.epoch)
        order = self.indices[torch.randperm(len(self.indices), generator=generator).numpy()]
        for start in range(0, len(order), self.batch_size):
            yield self.gather(order[start : start + self.batch_size])

    def gather(self, graphs: np.ndarray):
        from torch_geometric.data import Batch

        k = len(graphs)
        first, counts = self.nodes[graphs], self.nodes[graphs + 1] - self.nodes[graphs]
        efirst, ecounts = self.edges[graphs], self.edges[graphs + 1] - self.edges[graphs]
        offsets = np.cumsum(counts) - counts  # each graph's first node in the batch
        eoffsets = np.cumsum(ecounts) - ecounts
        n, e = int(counts.sum()), int(ecounts.sum())
        index = np.concatenate(
            [
                np.repeat(first - offsets, counts) + np.arange(n),  # the nodes' rows
                np.repeat(efirst - eoffsets, ecounts) + np.arange(e),  # the edges' columns
                np.repeat(offsets, ecounts),  # what each edge's ends are shifted by
                np.repeat(np.arange(k), counts),  # the batch vector
                graphs,
            ]
        )
        small = torch.from_numpy(index)
        if self.where.type == "cuda":
            small = small.pin_memory().to(self.where, non_blocking=True)
        rows, columns = small[:n], small[n : n + e]
        shift, vector = small[n + e : n + 2 * e], small[n + 2 * e : 2 * n + 2 * e]
        batch = Batch(
            x=self.x[rows],
            edge_index=self.edge_index[:, columns] + shift,
            y=self.y[small[2 * n + 2 * e :]],
            batch=vector,
        )
        batch._num_graphs = k
        if self.where != self.device:
            if self.pin:
                batch = batch.pin_memory()
            batch = batch.to(self.device, non_blocking=True)
        return batch


def hand_own_data(model, optimizer, device, precision: str, batches: OwnBatches):
    """The loop doing qg's work (:func:`hand_same_work`'s step) over batches of its own
    making (:class:`OwnBatches`): its own reshuffle and gather, not qg's loader."""
    params = list(model.parameters())

    def train(n: int | None = None) -> torch.Tensor:
        return _work_epoch(model, optimizer, params, device, precision, batches, n)

    return train


def common_pyg(model, optimizer, device, precision: str):
    """The loop of PyTorch Geometric's examples: its DataLoader, a copy and a read each step."""

    def train(loader) -> float:
        model.train()
        total = count = 0
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            with autocast(device, precision):
                loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.item() * batch.num_graphs
            count += batch.num_graphs
        return total / count

    return train
