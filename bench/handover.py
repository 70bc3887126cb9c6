"""The hand-over after preparation: the graphs two ranks made, read by the parent.

``--graphs`` small graphs (20 nodes, 40 edges, as small causal sets), one rank's share, handed
over as ``data.storage.ranges.in_parallel`` hands them (columns of tensors, written with
``torch.save`` and read with ``torch.load(weights_only=True)``) and rebuilt as graphs; beside
it, what the hand-over used to be: the list pickled and unpickled. Both in one process, one
after the other. Then the real path: two ranks make the graphs and ``in_parallel`` hands them
to the parent, timed from the last rank's end to the parent's list of graphs, at ``--graphs``
and at ``--field`` (300,000, as a large preparation).

The parent's side is what ``qg generate --world-size N`` and a job's data preparation wait for
after the ranks' progress says 100 %.

    python bench/handover.py [--graphs 30000] [--field 300000]
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

from QuantumGravPy.data.storage import columns  # noqa: E402
from QuantumGravPy.data.storage.ranges import in_parallel  # noqa: E402
from QuantumGravPy.parallel import handover  # noqa: E402


def make(count: int, seed: int = 0) -> list[Data]:
    g = torch.Generator().manual_seed(seed)
    return [
        Data(x=torch.rand(20, 3, generator=g),
             edge_index=torch.randint(0, 20, (2, 40), generator=g),
             y=torch.tensor([i % 2]), pos=torch.rand(20, 2, generator=g))
        for i in range(count)
    ]  # fmt: skip


def _part(rank: int, world_size: int, count: int, folder: str) -> list[Data]:
    """One rank's share, made as a preparation makes graphs; when it ended, for the parent."""
    graphs = make(count // world_size, seed=rank)
    (Path(folder) / f"ended{rank}").write_text(repr(time.time()))
    return graphs


def after_the_ranks(count: int, world_size: int = 2) -> float:
    """Seconds from the last rank's end to the parent's list of graphs, through
    ``in_parallel`` as ``qg generate --world-size`` and a job's preparation use it."""
    with tempfile.TemporaryDirectory() as tmp:
        parts = in_parallel(_part, world_size, count, tmp)
        done = time.time()
        ended = max(float((Path(tmp) / f"ended{r}").read_text()) for r in range(world_size))
    assert sum(map(len, parts)) == count - count % world_size
    return done - ended


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graphs", type=int, default=30_000)
    parser.add_argument("--field", type=int, default=300_000, help="graphs of the real path's "
                        "second row: a large preparation")  # fmt: skip
    args = smoke.parse(parser, graphs=200, field=400)
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
    print(
        "\nAs a user's job meets it: two ranks make the graphs, and the parent gets them "
        "through `data.storage.ranges.in_parallel` (`qg generate --world-size 2`):\n"
    )
    print("| graphs | from the last rank's end to the parent's list (s) |")
    print("|---|---|")
    for count in dict.fromkeys([args.graphs, args.field]):
        print(f"| {count:,} | {after_the_ranks(count):.2f} |")


if __name__ == "__main__":
    main()
