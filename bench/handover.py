"""The hand-over after preparation: the graphs two ranks made, read by the parent.

Each rank makes ``--graphs / 2`` small graphs (20 nodes, 40 edges, as small causal sets), and
the parent gets them back as ``data.ranges.in_parallel`` hands them over (columns of tensors,
read with ``torch.load(weights_only=True)``), timed from the ranks' end to the list of graphs;
beside it, what the hand-over used to be (the list pickled and unpickled, each tensor in
torch's legacy format), timed in one process.

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graphs", type=int, default=30_000)
    graphs = make(parser.parse_args().graphs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result0.pt"
        start = time.perf_counter()
        handover.write(path, columns.pack(graphs))
        written = time.perf_counter() - start
        start = time.perf_counter()
        back = columns.unpack(handover.read(path))
        read = time.perf_counter() - start
    assert all(torch.equal(a.x, b.x) for a, b in zip(graphs, back, strict=True))
    start = time.perf_counter()
    pickled = pickle.dumps(graphs)
    dumped = time.perf_counter() - start
    start = time.perf_counter()
    pickle.loads(pickled)
    loaded = time.perf_counter() - start
    print(f"{len(graphs)} graphs: columns written by the rank in {written:.2f} s, read by the "
          f"parent in {read:.2f} s; pickled {dumped:.2f} s, unpickled {loaded:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
