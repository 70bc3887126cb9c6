"""Importable helpers that configs in the tests name by dotted path."""

import torch
from torch_geometric.data import Data, InMemoryDataset


def ring_graphs(num_graphs: int = 40, num_features: int = 3) -> list[Data]:
    """Rings (class 0) and paths (class 1) of 5 to 9 nodes, with constant node features."""
    graphs = []
    for i in range(num_graphs):
        n = 5 + i % 5
        src = torch.arange(n - 1)
        edges = torch.stack([src, src + 1])
        label = i % 2
        if label == 0:
            edges = torch.cat([edges, torch.tensor([[n - 1], [0]])], dim=1)
        edges = torch.cat([edges, edges.flip(0)], dim=1)
        graphs.append(
            Data(x=torch.ones(n, num_features), edge_index=edges, y=torch.tensor([label]))
        )
    return graphs


def not_a_dataset() -> int:
    return 42


def nan_loss(outputs, batch):
    """A criterion written as a function of (outputs, batch) that always diverges."""
    return outputs.sum() * float("nan")


def mean_cross_entropy(outputs, batch):
    return torch.nn.functional.cross_entropy(outputs, batch.y)


def imbalanced_rings(num_graphs: int = 200, minority_every: int = 10) -> list[Data]:
    """Rings (class 0) with a path (class 1) only every ``minority_every`` graphs.

    Paths carry ``weight`` 5 and rings 1, for the weighted sampler.
    """
    pool = ring_graphs(2 * num_graphs)
    rings = iter(g for g in pool if int(g.y) == 0)
    paths = iter(g for g in pool if int(g.y) == 1)
    graphs = [next(paths) if i % minority_every == 0 else next(rings) for i in range(num_graphs)]
    for g in graphs:
        g.weight = torch.tensor([5.0 if int(g.y) == 1 else 1.0])
    return graphs


class ReverseSampler(torch.utils.data.Sampler):
    """A custom sampler: the dataset backwards."""

    def __init__(self, dataset):
        self.n = len(dataset)

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))


def charged_rings(num_graphs: int = 160) -> list[Data]:
    """Identical rings whose class is the sign of a graph-level number, ``charge``, |charge| >= 0.5.

    Nothing in the nodes or edges tells the classes apart: only ``model.graph_features`` can.
    Each graph also carries a vector ``spin`` of 3 numbers (noise) and an integer ``count``.
    """
    g = torch.Generator().manual_seed(0)
    n = 6
    src = torch.arange(n)
    ring = torch.stack([src, (src + 1) % n])
    edges = torch.cat([ring, ring.flip(0)], dim=1)
    graphs = []
    for i in range(num_graphs):
        sign = 1.0 if i % 2 else -1.0  # classes apart by a gap: |charge| >= 0.5
        charge = sign * (0.5 + torch.rand(1, generator=g))
        graphs.append(
            Data(
                x=torch.ones(n, 2),
                edge_index=edges,
                y=torch.tensor([int(charge > 0)]),
                charge=charge,
                spin=torch.randn(1, 3, generator=g),
                count=torch.tensor([n]),
            )
        )
    return graphs


def imbalanced_kinds(num_graphs: int = 200) -> list[Data]:
    """``imbalanced_rings`` with the class in ``kind`` and no ``y``: for tasks that name it."""
    graphs = imbalanced_rings(num_graphs)
    for g in graphs:
        g.kind = g.y
        del g.y
    return graphs


def reject(graph: Data) -> bool:
    """A pre_filter that keeps nothing."""
    return False


def at_least_14_elements(graph: Data) -> bool:
    """A pre_filter keeping causal sets of 14 elements or more."""
    return graph.num_nodes >= 14


class RingsOnDemand(torch.utils.data.Dataset):
    """``ring_graphs`` built one at a time when read, as a dataset on disk would be."""

    def __init__(self, num_graphs: int = 40):
        self.num_graphs = num_graphs

    def __len__(self):
        return self.num_graphs

    def __getitem__(self, index):
        return ring_graphs(index + 1)[index]


def rings_on_demand(num_graphs: int = 40) -> RingsOnDemand:
    return RingsOnDemand(num_graphs)


def wide_graph(file: str, index: int, num_nodes: int = 500, num_features: int = 256) -> Data:
    """A ``data.reader``: sample ``index`` as a path of ``num_nodes`` nodes with wide random
    features (about half a megabyte), labelled by parity: heavy graphs, quickly made."""
    generator = torch.Generator().manual_seed(index)
    src = torch.arange(num_nodes - 1)
    edges = torch.stack([src, src + 1])
    return Data(
        x=torch.randn(num_nodes, num_features, generator=generator),
        edge_index=torch.cat([edges, edges.flip(0)], dim=1),
        y=torch.tensor([index % 2]),
    )


def fail_on_19_elements(graph: Data) -> Data:
    """A ``data.pre_transform`` that fails part-way through a build: on a causal set of 19."""
    if graph.num_nodes == 19:
        raise RuntimeError("a causal set of 19 elements")
    return graph


def rings_labelled_from_one(num_graphs: int = 40) -> list[Data]:
    """ring_graphs with Julia's 1-based labels: rings 1, paths 2."""
    graphs = ring_graphs(num_graphs)
    for g in graphs:
        g.y = g.y + 1
    return graphs


class SlowOnRank1(torch.utils.data.Dataset):
    """``ring_graphs``, each read taking 20 ms on rank 1 of a distributed job."""

    def __init__(self, num_graphs: int):
        self.graphs = ring_graphs(num_graphs)

    def __len__(self):
        return len(self.graphs)

    def __getitem__(self, index):
        import time

        import torch.distributed as dist

        if dist.is_initialized() and dist.get_rank() == 1:
            time.sleep(0.02)
        return self.graphs[index]


def slow_on_rank_1(num_graphs: int = 80) -> SlowOnRank1:
    return SlowOnRank1(num_graphs)


class _InMemory(InMemoryDataset):
    def __init__(self, graphs: list[Data]):
        super().__init__(None)
        self.data, self.slices = self.collate(graphs)


def imbalanced_rings_in_memory(num_graphs: int = 200) -> InMemoryDataset:
    """:func:`imbalanced_rings` held as PyTorch Geometric holds a dataset in memory (one
    tensor per attribute, with per-graph boundaries), as the batches by index read it."""
    return _InMemory(imbalanced_rings(num_graphs))


def breaks_on_sample_2(file: str, index: int) -> Data:
    """A ``data.reader`` with a bug: sample 2 of any file makes it fail."""
    graphs = ring_graphs(4)
    return graphs[index % 4] if index != 2 else graphs[{"a": 0}["b"]]


def shuffled_rings(num_graphs: int = 80) -> list[Data]:
    """Rings shuffled without a seed, as a loader might (numpy's default_rng() or
    random.Random() draw fresh entropy from the system): another order in every process."""
    import random

    graphs = imbalanced_rings(num_graphs)
    random.Random().shuffle(graphs)
    return graphs


def seeded_shuffled_rings(num_graphs: int = 80) -> list[Data]:
    """The same, with the shuffle seeded: the same order in every process."""
    import random

    graphs = imbalanced_rings(num_graphs)
    random.Random(0).shuffle(graphs)
    return graphs


def rings_with_heat(num_graphs: int = 60) -> list[Data]:
    """Rings and paths (the class) whose nodes carry a value each, ``heat`` (twice the first
    feature): a graph-level and a node-level target on graphs with no causal-set origin."""
    g = torch.Generator().manual_seed(0)
    graphs = ring_graphs(num_graphs)
    for graph in graphs:
        graph.x = torch.randn(graph.num_nodes, 3, generator=g)
        graph.heat = 2.0 * graph.x[:, :1]
    return graphs


def rings_with_edge_signs(num_graphs: int = 120) -> list[Data]:
    """Rings whose class is carried by their edges alone: every edge has a feature vector
    (edge_attr, 2 numbers) whose first number is +1 in class 1 and -1 in class 0; the nodes
    are all alike."""
    g = torch.Generator().manual_seed(0)
    graphs = []
    for i in range(num_graphs):
        n = 6 + i % 4
        src = torch.arange(n)
        ring = torch.stack([src, (src + 1) % n])
        edges = torch.cat([ring, ring.flip(0)], dim=1)
        sign = 1.0 if i % 2 else -1.0
        attr = torch.stack(
            [torch.full((edges.shape[1],), sign), torch.rand(edges.shape[1], generator=g)], 1
        )
        graphs.append(
            Data(x=torch.ones(n, 2), edge_index=edges, edge_attr=attr, y=torch.tensor([i % 2]))
        )
    return graphs


class Recorder:
    """A training.callbacks object: appends what it is told to a JSON-lines file of its own
    (``path``, with the rank in its name), to be read back by a test."""

    def __init__(self, path: str, every_rank: bool = False, fail_at: str | None = None):
        self.path, self.every_rank, self.fail_at = path, every_rank, fail_at

    def _write(self, trainer, point, **what):
        import json

        if point == self.fail_at:
            raise ValueError(f"{point} failed on purpose")
        with open(f"{self.path}.{trainer.rank}", "a") as f:
            f.write(json.dumps({"point": point, **what}) + "\n")

    def on_train_start(self, trainer):
        self._write(trainer, "on_train_start")

    def on_epoch_end(self, trainer, row):
        self._write(trainer, "on_epoch_end", epoch=row["epoch"], val_loss=row["val_loss"])

    def on_checkpoint(self, trainer, path):
        self._write(trainer, "on_checkpoint", name=str(path).rsplit("/", 1)[-1])

    def on_train_end(self, trainer, history):
        self._write(trainer, "on_train_end", epochs=len(history))

    def on_test_end(self, trainer, metrics):
        self._write(trainer, "on_test_end", test_loss=metrics["test_loss"])


class NoHooks:
    """Not a callback: none of the methods."""


class StopOnce:
    """A training.callbacks object that stops the run once, at the end of epoch ``epoch``
    (it leaves ``marker`` behind, and a resumed run goes on past it): an interruption."""

    def __init__(self, marker: str, epoch: int = 2):
        self.marker, self.epoch = marker, epoch

    def on_epoch_end(self, trainer, row):
        import os

        if row["epoch"] == self.epoch and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"stopped after epoch {self.epoch}")


class FillsTheDisk:
    """A training.callbacks object: from the end of epoch ``after`` on, every checkpoint that
    the process writing them writes fails as a write to a full device does (torch.save itself
    also serves the collectives, which go on)."""

    def __init__(self, after: int):
        self.after = after

    def on_epoch_end(self, trainer, row):
        from QuantumGravPy.runs import checkpoint

        class Full:
            def __getattr__(self, name):
                return getattr(torch, name)

            @staticmethod
            def save(*args, **kwargs):
                import errno

                raise OSError(errno.ENOSPC, "No space left on device")

        if row["epoch"] == self.after:
            checkpoint.torch = Full()


def fails_on_rank_1(num_graphs: int = 80) -> list[Data]:
    """A data.dataset function that cannot read its graphs in the second process of a job."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 1:
        raise RuntimeError("rank 1 cannot read its graphs")
    return imbalanced_rings(num_graphs)


def rings_with_edge_heat(num_graphs: int = 60) -> list[Data]:
    """Rings and paths whose edges each carry a value, ``flow`` (the sum of the first features
    of the edge's two nodes): an edge-level target on a PyG user's graphs, paired by
    edge_index."""
    g = torch.Generator().manual_seed(0)
    graphs = ring_graphs(num_graphs)
    for graph in graphs:
        graph.x = torch.randn(graph.num_nodes, 3, generator=g)
        graph.flow = graph.x[graph.edge_index[0], 0] + graph.x[graph.edge_index[1], 0]
    return graphs
