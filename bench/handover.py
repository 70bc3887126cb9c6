"""The hand-over after preparation: the graphs two ranks made, read by the parent.

``--graphs`` small graphs (20 nodes, 40 edges, as small causal sets), one rank's share, handed
over as ``data.ranges.in_parallel`` hands them (columns of tensors, written with ``torch.save``
and read with ``torch.load(weights_only=True)``) and rebuilt as graphs; beside it, what the
hand-over used to be: the list pickled and unpickled. Both in one process, one after the other.

The parent's side is what ``qg generate --world-size N`` and a job's data preparation wait for
after the ranks' progress says 100 %.

    python bench/handover.py [--graphs 30000]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import smoke  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from QuantumGravPy.data import columns  # noqa: E402
from QuantumGravPy.parallel import handover  # noqa: E402


def make(count: int, seed: int = 0) -> list[Data]:
    g = torch.Generator().manual_seed(seed)
    return [
        Data(x=torch.rand(20, 3, generator=g),
             edge_index=torch.randint(0, 20, (2, 40), generator=g),
             y=torch.tensor([i % 2]), pos=torch.rand(20, 2, generator=g))
        for i in range(count)
    ]  # fmt: skip


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graphs", type=int, default=30_000)
    args = smoke.parse(parser, graphs=200)
    graphs = make(args.graphs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result0.pt"
        _, written = timed(lambda: handover.write(path, columns.pack(graphs)))
        back, read = timed(lambda: columns.unpack(handover.read(path)))
    assert all(torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
               for a, b in zip(graphs, back, strict=True))  # fmt: skip
    pickled, dumped = timed(lambda: pickle.dumps(graphs))
    _, loaded = timed(lambda: pickle.loads(pickled))
    print(f"{len(graphs):,} graphs of 20 nodes and 40 edges, one rank's share, in one process:\n")
    print("| hand-over | the rank writes (s) | the parent reads (s) | both (s) | against pickle |")
    print("|---|---|---|---|---|")
    print(f"| columns of tensors, read as data (now) | {written:.2f} | {read:.2f} | "
          f"{written + read:.2f} | {(written + read) / (dumped + loaded):.3f}x |")  # fmt: skip
    print(f"| the list of graphs pickled (before) | {dumped:.2f} | {loaded:.2f} | "
          f"{dumped + loaded:.2f} | 1x |")  # fmt: skip


if __name__ == "__main__":
    main()
