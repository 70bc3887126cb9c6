"""Causal-set generation throughput: the embedded dataset's graphs, small and large.

python bench/generation.py [--quick]

The embedded dataset's generator at three sizes, each against its target:
- 10,000 graphs of 64 elements (dimensions 2-4) on one thread (target < 30 s);
- 1,000 4D sprinklings of 1,024 elements on all cores, as the dataset builds them: relations,
  links (one matrix product per batch), node features (target <= 90 s);
- one 4D sprinkling of 4,096 elements: relations and links (target <= 1.5 s), and with the
  node features; the median of 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import smoke

from QuantumGravPy.data import generate_causal_set_graphs
from QuantumGravPy.physics import causal_structure, diamond_coordinates, node_features
from QuantumGravPy.physics.orders import count_dtype


def graphs(count: int, points: int, dimensions: tuple[int, ...]) -> tuple[float, float]:
    """(seconds, link edges per graph) for generating ``count`` graphs of ``points`` elements."""
    start = time.perf_counter()
    made = generate_causal_set_graphs(
        0,
        count,
        num_points=(points, points),
        dimensions=dimensions,
        seed=0,
        progress=False,
    )
    seconds = time.perf_counter() - start
    return seconds, sum(g.num_edges for g in made) / len(made) / 2


def one_large(points: int, repeats: int) -> tuple[float, float]:
    """Median seconds of (relations and links, and with node features) for one 4D set."""
    structure, everything = [], []
    for seed in range(repeats):
        start = time.perf_counter()
        coords = torch.from_numpy(diamond_coordinates(points, 4, np.random.default_rng(seed)))
        relations, links = causal_structure(coords[None])
        structure.append(time.perf_counter() - start)
        node_features(relations, links)
        everything.append(time.perf_counter() - start)
    return statistics.median(structure), statistics.median(everything)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the graphs")
    args = smoke.parse(parser, quick=True)
    scale = 10 if args.quick else 1
    cores = torch.get_num_threads()
    print(f"matrix products for counts in {count_dtype(torch.device('cpu'))}; {cores} threads\n")
    print("| work | threads | seconds | per graph | link edges each | target | |")
    print("|---|---|---|---|---|---|---|")

    def row(work, threads, seconds, count, edges, target):
        met = "met" if seconds * scale <= target else "MISSED"
        if scale > 1 and count > 1:
            met = "(quick)"
        shown = "-" if edges != edges else f"{edges:.0f}"
        print(
            f"| {work} | {threads} | {seconds:.2f} | {seconds / count * 1000:.2f} ms | "
            f"{shown} | <= {target:g} s | {met} |"
        )

    torch.set_num_threads(1)
    count = 10_000 // scale
    seconds, edges = graphs(count, 64, (2, 3, 4))
    row(f"{count} graphs of 64 elements, dimensions 2-4", 1, seconds, count, edges, 30)
    torch.set_num_threads(cores)
    count = 1000 // scale
    seconds, edges = graphs(count, 1024, (4,))
    row(f"{count} 4D graphs of 1,024 elements", cores, seconds, count, edges, 90)
    structure, everything = one_large(4096, 3)
    row("one 4D set of 4,096: relations and links", cores, structure, 1, float("nan"), 1.5)
    row("one 4D set of 4,096: and node features", cores, everything, 1, float("nan"), 1.5)


if __name__ == "__main__":
    main()
