"""The data path: a training epoch as a user runs it, against the same epoch over batches
collated beforehand, and against PyTorch Geometric's own loader.

Four sides train the shipped config's model (`configs/train.yaml`) in one trainer: the real
epoch (`Trainer.train_epoch` over its own training loader: sampling, batch assembly, the copy
to the device), the pre-collated epoch (the same batches, collected into a list before the
timing starts: the model's work alone), the same batches copied as they are asked for (fresh
memory for every batch: the least any loader that makes new batches costs), and the epoch over
PyTorch Geometric's `DataLoader` on the same split and sampler (one `Data` per graph, then
`Batch.from_data_list`: the path this project took before batches were assembled by index).
Each epoch takes 2 batches from each side in turn, the same batches from all of them (the
loaders are not re-seeded between epochs), the order of the sides running through every
permutation, so that the sides are timed a few steps apart (this machine's speed drifts by
10 % from one epoch to the next) and each comes first, last and after each other equally often.
A side's epoch is the sum of its blocks (fetching its batches and training on them); each
side's median over the epochs is reported, and the ratios of those medians, for batch 32 and
128, the graphs in memory and on disk (`data.storage`), one process and two (at the same
global batch, a core each; rank 0's times). The second table times batch assembly alone on the
same random indices: ours against `Batch.from_data_list` of the dataset's graphs. The third
compares whole epochs with data-loader worker processes.

    python bench/data_path.py [--graphs 2000] [--epochs 10] [--storage memory disk] [--batch 32 128]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch_geometric.data import Batch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data.batches import loaders  # noqa: E402
from QuantumGravPy.data.batches.batching import IndexBatcher  # noqa: E402
from QuantumGravPy.data.sources.datasets import dataset_from_config  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402

TARGETS = {"memory": 1.05, "disk": 1.10}  # real / pre-collated, batch 32
BLOCK = 2  # batches of one side in a row
ASSEMBLY_TARGET = 10.0


class Interleaved:
    """One epoch that takes ``BLOCK`` batches from each side in turn (the same batches from
    each: every side yields the same sequence), timing each side's blocks: a block's time runs
    from the request of its first batch to the request of the next block's, so it holds the
    fetching of its batches and the training steps on them. Alternating a few steps apart
    keeps this machine's drift (10 % from one epoch to the next) out of the ratios. The order
    of the sides runs through every permutation, block after block (starting at ``offset``),
    so that each side comes first, in the middle and last, and after each other side, equally
    often: what a block leaves behind (memory freed, caches) changes the next block's time."""

    def __init__(self, sides: dict, offset: int):
        self.sides, self.offset = sides, offset
        self.orders = list(itertools.permutations(sides))
        self.length = min(len(side) for side in sides.values())
        self.blocks: dict[str, list[float]] = {name: [] for name in sides}  # seconds each

    def __len__(self) -> int:
        return self.length * len(self.sides)

    def __iter__(self):
        iterators = {}
        for block, first in enumerate(range(0, self.length, BLOCK)):
            for name in self.orders[(block + self.offset) % len(self.orders)]:
                start = time.perf_counter()
                if name not in iterators:  # a loader's start (sampler, workers) is its own
                    iterators[name] = iter(self.sides[name])
                for _ in range(min(BLOCK, self.length - first)):
                    yield next(iterators[name])
                self.blocks[name].append(time.perf_counter() - start)


class Copied:
    """The pre-collated batches, each copied as it is asked for: fresh memory for every batch,
    the least that any loader making new batches costs (a copy of each tensor, no indexing)."""

    def __init__(self, batches: list):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            fresh = copy.copy(batch)  # its own store, then every tensor in it copied
            yield fresh.apply(torch.clone)


def compare(rank: int, world_size: int, config: qg.Config, epochs: int) -> list[dict[str, float]]:
    """Each epoch's seconds of each side on this rank."""
    if world_size > 1 and len(os.sched_getaffinity(0)) >= world_size:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})  # a core each
    t = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    real, _, _ = t.prepare_dataloaders()
    train = loaders.split_dataset(t.dataset, config.data.split, config.data.seed)[0]
    real.sampler.set_epoch(0)
    collated = list(real)  # the same batches, assembled before the timing starts
    original = loaders.index_batches
    loaders.index_batches = lambda *_: None  # PyTorch Geometric's loader, graph by graph
    try:
        pyg = t.make_train_loader(train)
    finally:
        loaders.index_batches = original
    pyg.sampler.set_epoch(0)
    sides = {"real": real, "collated": collated, "copied": Copied(collated), "pyg": pyg}
    t.train_epoch(Interleaved(sides, offset=0))  # warm-up
    seconds = []
    for epoch in range(epochs):
        interleaved = Interleaved(sides, offset=epoch)
        distributed.barrier()
        t.train_epoch(interleaved)
        seconds.append(interleaved.blocks)
    loaders.release_workers(real)
    loaders.release_workers(pyg)
    t.close()
    return seconds


def assembly(config: qg.Config, batch: int, repeats: int = 200) -> tuple[float, float]:
    """Microseconds per batch: ours, and Batch.from_data_list of the same graphs."""
    dataset = dataset_from_config(config.data, progress=False)
    batcher = IndexBatcher(dataset)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randperm(len(dataset), generator=g)[:batch].tolist() for _ in range(repeats)]
    sides = {
        "ours": batcher,
        "pyg": lambda indices: Batch.from_data_list([dataset[i] for i in indices]),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(5):
        for name, assemble in sides.items():
            start = time.perf_counter()
            for indices in batches:
                assemble(indices)
            times[name].append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(times["ours"]), statistics.median(times["pyg"])


WORKERS = (0, 1, 2)
WORKER_EPOCHS = 7
SETUPS = {  # the third table's rows: (overrides, torch threads of the training process)
    "memory": (["data.storage=memory"], None),
    "disk": (["data.storage=disk"], None),
    "memory, augmented (moderate)": (["data.storage=memory", "augmentation.preset=moderate"], None),
    "the same, 1 torch thread": (["data.storage=memory", "augmentation.preset=moderate"], 1),
}


def workers(config: qg.Config, repeats: int) -> dict[int, float]:
    """Median seconds of a whole training epoch (one process, batch 32) with each number of
    worker processes, the loaders alternating epoch by epoch; workers persist across epochs.
    Whole epochs, not interleaved blocks: a worker fetches ahead while other sides train."""
    t = qg.Trainer(config)
    train = loaders.split_dataset(t.dataset, config.data.split, config.data.seed)[0]
    made = {}
    for count in WORKERS:
        training = dataclasses.replace(config.training, num_workers=count)
        made[count] = loaders.make_train_loader(train, training, config.augmentation)
        made[count].sampler.set_epoch(0)
    times: dict[int, list[float]] = {count: [] for count in WORKERS}
    for i in range(repeats + 1):
        for count in WORKERS if i % 2 == 0 else WORKERS[::-1]:
            start = time.perf_counter()
            t.train_epoch(made[count])
            if i > 0:  # the first round starts the workers and warms up
                times[count].append(time.perf_counter() - start)
    for loader in made.values():
        loaders.release_workers(loader)
    t.close()
    return {count: statistics.median(values) for count, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--storage", nargs="+", default=["memory", "disk"])
    parser.add_argument("--batch", nargs="+", type=int, default=[32, 128])
    args = smoke.parse(parser, graphs=200, epochs=1, batch=[32])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:

        def load(*extra: str) -> qg.Config:
            return qg.load_config(
                ROOT / "configs" / "train.yaml",
                [
                    f"data.root={tmp}/data",
                    f"data.num_graphs={args.graphs}",
                    f"training.path={tmp}/run",
                    "training.device=cpu",
                    "parallel.backend=gloo",
                    "log_level=WARNING",
                    *extra,
                ],
            )

        for storage in args.storage:
            qg.prepare_run(load(f"data.storage={storage}"), overwrite=True)  # the cache, once
        for storage in args.storage:
            for batch in args.batch:
                for world_size in (1, 2):
                    config = load(
                        f"data.storage={storage}", f"training.batch_size={batch // world_size}"
                    )
                    epochs = qg.spawn(compare, world_size, config, args.epochs, backend="gloo")
                    rows.append((storage, batch, world_size, epochs[0]))
        timings = {batch: assembly(load("data.storage=memory"), batch) for batch in args.batch}
        with_workers = {}
        default_threads = torch.get_num_threads()
        for name, (extra, threads) in SETUPS.items():
            torch.set_num_threads(threads or default_threads)
            with_workers[name] = workers(load(*extra), WORKER_EPOCHS)
        torch.set_num_threads(default_threads)
    print(
        f"{args.graphs} graphs (70 % of them trained on), the shipped model; each side's "
        f"median over {args.epochs} epochs, its blocks of {BLOCK} batches interleaved with the "
        "other sides' in every epoch; rank 0's times; in brackets, the lowest and highest "
        "ratio of single epochs\n"
    )
    print(
        "| storage | global batch | processes | s/epoch, pre-collated | real / pre-collated | "
        "copied / pre-collated | PyG DataLoader / pre-collated |"
    )
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for storage, batch, world_size, blocks in rows:
        epochs = [{name: sum(times) for name, times in epoch.items()} for epoch in blocks]
        m = {name: statistics.median(e[name] for e in epochs) for name in epochs[0]}
        cells = []
        for side in ("real", "copied", "pyg"):
            single = [e[side] / e["collated"] for e in epochs]
            cells.append(f"{m[side] / m['collated']:.3f} ({min(single):.2f}-{max(single):.2f})")
        if batch == 32:
            verdicts.append((storage, world_size, m["real"] / m["collated"]))
        print(
            f"| {storage} | {batch} | {world_size} | {m['collated']:.3f} | **{cells[0]}** | "
            f"{cells[1]} | {cells[2]} |"
        )
    print("\n| batch | assembly, ours (us) | Batch.from_data_list (us) | speed-up |")
    print("|---|---|---|---|")
    for batch, (ours, pyg) in timings.items():
        print(f"| {batch} | {ours:.0f} | {pyg:.0f} | **{pyg / ours:.1f}x** |")
    print()
    for storage, target in TARGETS.items():
        ok = all(r <= target for s, _, r in verdicts if s == storage)
        if not any(s == storage for s, _, _ in verdicts):
            continue
        print(f"- real / pre-collated at batch 32, {storage}: target <= {target}: "
              f"{'met' if ok else 'MISSED'}")  # fmt: skip
    ok = all(pyg / ours >= ASSEMBLY_TARGET for ours, pyg in timings.values())
    print(f"- assembly speed-up: target >= {ASSEMBLY_TARGET:.0f}x: {'met' if ok else 'MISSED'}")
    print(
        f"\nWorker processes (training.num_workers), one process, batch 32: whole epochs, the "
        f"loaders alternating, medians of {WORKER_EPOCHS}\n"
    )
    print("| data | s/epoch, 0 workers | 1 worker / 0 | 2 workers / 0 |")
    print("|---|---|---|---|")
    for name, m in with_workers.items():
        print(f"| {name} | {m[0]:.3f} | {m[1] / m[0]:.2f} | {m[2] / m[0]:.2f} |")


if __name__ == "__main__":
    main()
