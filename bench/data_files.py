"""Causal sets from Zarr files: preprocessing, training from disk, memory of an epoch.

python bench/data_files.py [--sets 1200] [--points 256] [--wide 7000] [--repeats 2]

- Preprocessing: a Zarr store of 4D sprinklings (one group per causal set, Julia's orientation)
  processed into the disk cache by 1 and by 2 processes, alternating, each into a fresh cache
  (target: 2 processes at least 1.6x as fast as one; process start-up included, which is why
  the store is a few thousand causal sets: on a few hundred, starting a process costs more than
  the work).
- Epoch time: one training epoch plus validation from `data.storage: disk` against `memory` on
  the same files and caches, alternating (target: disk at most 1.25x memory).
- Memory: a stacked Zarr store whose per-element features (256 columns) make the processed
  dataset over 2 GB; one epoch trained from disk in a fresh process, whose peak resident memory
  (imports included) is reported (target: under 1.5 GB).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import smoke

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.data import DiskDataset, FileSource, generate_causal_set_graphs
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.physics import causal_structure

SPEEDUP_TARGET = 1.6
EPOCH_RATIO_TARGET = 1.25
RSS_TARGET_GB = 1.5
WIDE_FEATURES = 256


def config(root: Path, files: Path, *overrides: str):
    raw = {
        "name": "data-files",
        "log_level": "WARNING",
        "data": {"root": str(root), "files": [str(files)], "targets": {"y": "y"}},
        "training": {
            "path": str(root / "run"),
            "num_epochs": 1,
            "batch_size": 32,
            "checkpoint_every": 0,
        },
        "model": {"hidden_channels": 64, "num_layers": 3, "head_channels": [64]},
        "early_stopping": {"enabled": False},
    }
    return config_from_dict(apply_overrides(raw, list(overrides)))


def preprocessing(tmp: Path, sets: int, points: int, repeats: int) -> None:
    source = config_from_dict(
        {
            "data": {
                "root": str(tmp / "gen"),
                "num_graphs": sets,
                "num_points": [points, points],
                "dimensions": [4],
            }
        }
    )
    store = write_embedded(source.data, tmp / "sets.zarr")
    times: dict[int, list[float]] = {1: [], 2: []}
    for r in range(repeats):
        for world_size in (1, 2):
            cfg = config(tmp / f"pre_{world_size}_{r}", store, "data.storage=disk")
            start = time.perf_counter()
            DiskDataset(FileSource(cfg.data), cfg.data.root, world_size=world_size, progress=False)
            times[world_size].append(time.perf_counter() - start)
            shutil.rmtree(cfg.data.root)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"### Preprocessing {sets} causal sets of {points} elements from Zarr\n")
    print("| processes | seconds (median) | causal sets/s | speed-up |")
    print("|---|---|---|---|")
    print(f"| 1 | {one:.1f} | {sets / one:.0f} | 1.00 |")
    print(f"| 2 | {two:.1f} | {sets / two:.0f} | {one / two:.2f} |")
    met = "met" if one / two >= SPEEDUP_TARGET else "MISSED"
    print(f"\ntarget: 2 processes >= {SPEEDUP_TARGET}x one: {met}\n")
    return store


def epoch_times(tmp: Path, store: Path, repeats: int) -> None:
    seconds: dict[str, list[float]] = {"memory": [], "disk": []}
    for r in range(repeats):
        for storage in ("memory", "disk"):
            cfg = config(
                tmp / "epochs", store, f"data.storage={storage}", f"training.path={tmp}/e_{r}"
            )
            trainer = qg.Trainer(cfg)  # the cache of each storage is built on the first round
            loaders = trainer.prepare_dataloaders()
            start = time.perf_counter()
            trainer.run_training(*loaders[:2])
            seconds[storage].append(time.perf_counter() - start)
            trainer.close()
            shutil.rmtree(cfg.training.path)
    memory, disk = statistics.median(seconds["memory"]), statistics.median(seconds["disk"])
    print("### One epoch (training and validation) from disk against memory\n")
    print("| storage | seconds (median) | ratio |")
    print("|---|---|---|")
    print(f"| memory | {memory:.2f} | 1.00 |")
    print(f"| disk | {disk:.2f} | {disk / memory:.2f} |")
    met = "met" if disk / memory <= EPOCH_RATIO_TARGET else "MISSED"
    print(f"\ntarget: disk <= {EPOCH_RATIO_TARGET}x memory: {met}\n")


def write_wide(path: Path, count: int, points: int) -> None:
    """``count`` causal sets (64 distinct sprinklings, repeated) with random features."""
    graphs = generate_causal_set_graphs(
        0, 64, num_points=(points, points), dimensions=(4,), seed=1, progress=False
    )
    relations = [causal_structure(g.pos[None])[0][0].numpy().astype(np.uint8) for g in graphs]
    root = zarr.open_group(str(path), mode="w")
    adj = root.create_array(
        "adjacency_matrix",
        shape=(count, points, points),
        dtype="uint8",
        chunks=(1, points, points),
    )
    features = root.create_array(
        "features",
        shape=(count, points, WIDE_FEATURES),
        dtype="float32",
        chunks=(1, points, WIDE_FEATURES),
    )
    root.create_array("cset_size", data=np.full(count, points))
    rng = np.random.default_rng(0)
    for first in range(0, count, 256):
        last = min(first + 256, count)
        adj[first:last] = np.stack([relations[i % len(relations)] for i in range(first, last)])
        features[first:last] = rng.standard_normal(
            (last - first, points, WIDE_FEATURES), dtype=np.float32
        )


def _epoch_peak(cfg, queue) -> None:
    trainer = qg.Trainer(cfg)
    start = time.perf_counter()
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    seconds = time.perf_counter() - start
    trainer.close()
    # VmHWM, not ru_maxrss: the latter starts from the parent's size at the fork before exec
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    queue.put((int(fields["VmHWM"].split()[0]) * 1024, seconds))


def memory(tmp: Path, count: int, points: int) -> None:
    store = tmp / "wide.zarr"
    write_wide(store, count, points)
    cfg = config(
        tmp / "wide",
        store,
        "data.storage=disk",
        "data.node_features=[features]",
        "data.targets={y: cset_size}",  # a target is needed; the epoch's memory is the point
        "tasks=[{name: size, type: regression, target: y}]",
    )
    start = time.perf_counter()
    dataset = DiskDataset(FileSource(cfg.data), cfg.data.root, world_size=2, progress=False)
    built = time.perf_counter() - start
    size = sum(Path(p).stat().st_size for p in dataset.processed_paths)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_epoch_peak, args=(cfg, queue))
    process.start()
    peak, seconds = queue.get(timeout=1800)
    process.join()
    print(f"### Peak memory of an epoch from disk on {size / 1e9:.2f} GB of processed graphs\n")
    print(
        "| causal sets | elements | features | processed | built (2 processes) | epoch | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {count} | {points} | {WIDE_FEATURES} | {size / 1e9:.2f} GB | {built:.0f} s "
        f"| {seconds:.0f} s | {peak / 1e9:.2f} GB |"
    )
    met = "met" if peak / 1e9 < RSS_TARGET_GB and size >= 2e9 else "MISSED"
    print(f"\ntarget: peak under {RSS_TARGET_GB} GB on at least 2 GB processed: {met}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=1200)
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--wide", type=int, default=7000)
    parser.add_argument("--repeats", type=int, default=2)
    args = smoke.parse(parser, sets=60, points=48, wide=40, repeats=1)
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="qg-bench-files-"))
    try:
        store = preprocessing(tmp, args.sets, args.points, args.repeats)
        epoch_times(tmp, store, args.repeats)
        memory(tmp, args.wide, args.points)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
