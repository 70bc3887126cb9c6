"""Your own graphs in files: the communities graphs (communities.py) written the two ways
``data.files`` reads general graphs.

- ``communities.pt``: the list of ``Data``, saved with ``torch.save`` (an ``InMemoryDataset``'s
  processed file is read too);
- ``communities.h5``: an HDF5 file with one group per graph, ``graph_1``, ``graph_2``, ...,
  each holding the graph's tensors as arrays of the same names (``edge_index``, ``x``, ``y``,
  ``member``, ``stats``).

Run from the folder the files should go to:

    python examples/own_graphs/save_graphs.py --num-graphs 400
"""

from __future__ import annotations

import argparse
from pathlib import Path

import h5py
import torch
from communities import make_graphs


def save(num_graphs: int = 400, seed: int = 0, folder: Path = Path(".")) -> None:
    graphs = make_graphs(num_graphs, seed)
    torch.save(graphs, folder / "communities.pt")
    with h5py.File(folder / "communities.h5", "w") as f:
        for i, graph in enumerate(graphs, start=1):
            group = f.create_group(f"graph_{i}")
            for key, value in graph.items():
                group.create_dataset(key, data=value.numpy())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-graphs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    save(args.num_graphs, args.seed)
    print(f"{args.num_graphs} graphs written to communities.pt and communities.h5")
