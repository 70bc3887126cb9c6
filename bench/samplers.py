"""One rank's epoch of distributed samplers at N = 2,000,000 and W = 8: time and peak memory.

Compared (rank 3 of 8; every measurement in a fresh process, so that peak memory is its own):
  - iterating a WeightedRandomSampler over N once: the floor for any wrapper that keeps the
    wrapped sequence;
  - qg.DistributedSamplerWrapper around that WeightedRandomSampler (target: <= 1.25x the floor);
  - PyTorch Lightning's DistributedSamplerWrapper around it (materialises list(sampler));
  - plain torch DistributedSampler (a permutation, no weights);
  - qg.DistributedWeightedRandomSampler (target: >= 10x faster than Lightning's wrapper).
Medians of alternating repeats. Needs the bench extra: pip install -e '.[bench]'.

    python bench/samplers.py [--n 2000000] [--world-size 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
import time
from pathlib import Path

import smoke

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RANK = 3


def _make(name: str, n: int, world_size: int):
    import torch
    from torch.utils.data import DistributedSampler, WeightedRandomSampler

    import QuantumGravPy as qg

    weights = torch.rand(n, generator=torch.Generator().manual_seed(0)) + 0.01
    inner = WeightedRandomSampler(weights, num_samples=n, generator=torch.Generator())
    if name == "WeightedRandomSampler, iterated once":
        return inner
    if name == "qg.DistributedSamplerWrapper":
        return qg.DistributedSamplerWrapper(inner, num_replicas=world_size, rank=RANK, seed=0)
    if name == "Lightning DistributedSamplerWrapper":
        from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

        return DistributedSamplerWrapper(inner, num_replicas=world_size, rank=RANK, shuffle=False)
    if name == "torch DistributedSampler":
        return DistributedSampler(range(n), num_replicas=world_size, rank=RANK, seed=0)
    if name == "qg.DistributedWeightedRandomSampler":
        return qg.DistributedWeightedRandomSampler(
            weights, num_samples=n, num_replicas=world_size, rank=RANK, seed=0
        )
    raise ValueError(name)


def _measure(name: str, n: int, world_size: int, out) -> None:
    sampler = _make(name, n, world_size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    count = sum(1 for _ in sampler)  # consume as a DataLoader would, keeping nothing
    seconds = time.perf_counter() - start
    peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    out.put((seconds, peak_mb, count))


NAMES = [
    "WeightedRandomSampler, iterated once",
    "qg.DistributedSamplerWrapper",
    "Lightning DistributedSamplerWrapper",
    "torch DistributedSampler",
    "qg.DistributedWeightedRandomSampler",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = smoke.parse(parser, n=20_000, repeats=1)
    ctx = mp.get_context("spawn")
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in NAMES}
    for _ in range(args.repeats):
        for name in NAMES:
            queue = ctx.SimpleQueue()
            process = ctx.Process(target=_measure, args=(name, args.n, args.world_size, queue))
            process.start()
            results[name].append(queue.get())
            process.join()
    print(
        f"One rank's epoch (rank {RANK}) at N = {args.n:,} and W = {args.world_size}, each in a "
        f"fresh process, medians of {args.repeats}\n"
    )
    print("| sampler | s/epoch | peak MB during the epoch | items |")
    print("|---|---|---|---|")
    medians = {}
    for name, rows in results.items():
        seconds = statistics.median(r[0] for r in rows)
        peak = statistics.median(r[1] for r in rows)
        medians[name] = seconds
        print(f"| {name} | {seconds:.3f} | {peak:.1f} | {rows[0][2]:,} |")
    print()
    floor = medians["WeightedRandomSampler, iterated once"]
    wrapper = medians["qg.DistributedSamplerWrapper"] / floor
    native = (
        medians["Lightning DistributedSamplerWrapper"]
        / medians["qg.DistributedWeightedRandomSampler"]
    )
    verdict = "met" if wrapper <= 1.25 else "MISSED"
    print(f"- qg wrapper / floor: {wrapper:.2f} (target <= 1.25: {verdict})")
    print(
        f"- Lightning wrapper / qg.DistributedWeightedRandomSampler: {native:.1f}x "
        f"(target >= 10: {'met' if native >= 10 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
