"""Causal-set generation throughput on one core: 10,000 graphs of 64 elements (target < 30 s).

python bench/generation.py [--graphs 10000] [--points 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from QuantumGravPy.data import generate_causal_set_graphs

TARGET_SECONDS = 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    graphs = generate_causal_set_graphs(
        0,
        args.graphs,
        num_points=(args.points, args.points),
        dimensions=(2, 3, 4),
        seed=0,
        progress=False,
    )
    seconds = time.perf_counter() - start
    edges = sum(g.num_edges for g in graphs) / len(graphs)
    print(
        f"{len(graphs)} causal sets of {args.points} elements (dimensions 2-4) in {seconds:.1f} s "
        f"on one thread ({len(graphs) / seconds:.0f} graphs/s, {edges:.0f} link edges each)"
    )
    if args.graphs == 10_000 and args.points == 64:
        print(f"target < {TARGET_SECONDS:.0f} s: {'met' if seconds < TARGET_SECONDS else 'MISSED'}")


if __name__ == "__main__":
    main()
