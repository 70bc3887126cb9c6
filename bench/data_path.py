"""The data path: a training epoch as a user runs it, against the same epoch over batches
collated beforehand, and against PyTorch Geometric's own loader.

Three sides train the shipped config's model (`configs/train.yaml`) in one trainer: the real
epoch (`Trainer.train_epoch` over its own training loader: sampling, batch assembly, the copy
to the device), the pre-collated epoch (the same batches, collected into a list before the
timing starts: the model's work alone), and the epoch over PyTorch Geometric's `DataLoader` on
the same split and sampler (one `Data` per graph, then `Batch.from_data_list`: the path this
project took before batches were assembled by index). The loader is not re-seeded between
epochs, so every epoch trains on the same batches. The sides alternate, several times; the
ratios of the medians are reported, for batch 32 and 128, the graphs in memory and on disk
(`data.storage`), one process and two (at the same global batch, a core each; rank 0's times).
The second table times batch assembly alone on the same random indices: ours against
`Batch.from_data_list` of the dataset's graphs.

    python bench/data_path.py [--graphs 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
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

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import loaders  # noqa: E402
from QuantumGravPy.data.batching import IndexBatcher  # noqa: E402
from QuantumGravPy.data.datasets import dataset_from_config  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402

TARGETS = {"memory": 1.05, "disk": 1.10}  # real / pre-collated, batch 32
ASSEMBLY_TARGET = 10.0


def timed_epoch(t, batches) -> float:
    distributed.barrier()
    start = time.perf_counter()
    t.train_epoch(batches)
    return time.perf_counter() - start


def compare(rank: int, world_size: int, config: qg.Config, repeats: int) -> dict[str, float]:
    """Median seconds of each side's epoch on this rank."""
    if world_size > 1 and len(os.sched_getaffinity(0)) >= world_size:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})  # a core each
    t = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    real, _, _ = t.prepare_dataloaders()
    train = loaders.split_dataset(t.dataset, config.data.split, config.data.seed)[0]
    real.sampler.set_epoch(0)
    collated = list(real)  # the same batches, assembled before the timing starts
    original = loaders.index_batches
    loaders.index_batches = lambda dataset: None  # PyTorch Geometric's loader, graph by graph
    try:
        pyg = t.make_train_loader(train)
    finally:
        loaders.index_batches = original
    pyg.sampler.set_epoch(0)
    sides = {"real": real, "collated": collated, "pyg": pyg}
    for batches in sides.values():
        timed_epoch(t, batches)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(repeats):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]
        for name in order:
            times[name].append(timed_epoch(t, sides[name]))
    loaders.release_workers(real)
    loaders.release_workers(pyg)
    t.close()
    return {name: statistics.median(values) for name, values in times.items()}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
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

        for storage in ("memory", "disk"):
            qg.prepare_run(load(f"data.storage={storage}"), overwrite=True)  # the cache, once
        for storage in ("memory", "disk"):
            for batch in (32, 128):
                for world_size in (1, 2):
                    config = load(
                        f"data.storage={storage}", f"training.batch_size={batch // world_size}"
                    )
                    medians = qg.spawn(compare, world_size, config, args.repeats, backend="gloo")
                    rows.append((storage, batch, world_size, medians[0]))
        timings = {batch: assembly(load("data.storage=memory"), batch) for batch in (32, 128)}
    print(
        f"{args.graphs} graphs (70 % of them trained on), the shipped model; medians of "
        f"{args.repeats} alternating repeats; rank 0's times\n"
    )
    print(
        "| storage | global batch | processes | s/epoch, pre-collated | real / pre-collated | "
        "PyG DataLoader / pre-collated |"
    )
    print("|---|---|---|---|---|---|")
    verdicts = []
    for storage, batch, world_size, m in rows:
        ratio = m["real"] / m["collated"]
        if batch == 32:
            verdicts.append((storage, world_size, ratio))
        print(
            f"| {storage} | {batch} | {world_size} | {m['collated']:.3f} | **{ratio:.2f}** | "
            f"{m['pyg'] / m['collated']:.2f} |"
        )
    print("\n| batch | assembly, ours (us) | Batch.from_data_list (us) | speed-up |")
    print("|---|---|---|---|")
    for batch, (ours, pyg) in timings.items():
        print(f"| {batch} | {ours:.0f} | {pyg:.0f} | **{pyg / ours:.1f}x** |")
    print()
    for storage, target in TARGETS.items():
        ok = all(r <= target for s, _, r in verdicts if s == storage)
        print(f"- real / pre-collated at batch 32, {storage}: target <= {target}: "
              f"{'met' if ok else 'MISSED'}")  # fmt: skip
    ok = all(pyg / ours >= ASSEMBLY_TARGET for ours, pyg in timings.values())
    print(f"- assembly speed-up: target >= {ASSEMBLY_TARGET:.0f}x: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
