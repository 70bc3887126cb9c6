"""How much curvature signal a causal set holds: two models stronger than the baselines.

python studies/curvature_signal.py [--num-points MIN MAX] [--graphs N] [--epochs E]

On the curvature kind's shipped config (the same graphs and split as studies/baselines.py), two
models that see more than the observables:
- gradient-boosted trees on 47 statistics: the observables, the interval abundances N_0..N_10,
  moments of the elements' past and future sizes and heights, and a 4 x 4 histogram of the
  elements' (past, future) sizes;
- a network that passes messages along every relation, not only the links, to the past and to
  the future separately (dense [N, N] products, the sets padded to one size).

Not part of `make studies` (several minutes); the findings of STUDIES.md quote what it
printed. If these stop where the baselines stop, the classes overlap at that size, whatever the
model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines import observables, relations_of  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import dataset_from_config  # noqa: E402
from QuantumGravPy.physics import observables as obs  # noqa: E402


def statistics(graph, relations: torch.Tensor) -> np.ndarray:
    n = graph.num_nodes
    x = graph.x.numpy()  # past, future, past links, future links, heights; all over N
    past, future = x[:, 0], x[:, 1]
    histogram = np.histogram2d(past, future, bins=4, range=[[0, 0.5], [0, 0.5]])[0].ravel() / n
    extra = [
        *(obs.interval_abundances(relations, 10).double().numpy() / n),
        (past * future).mean(),
        (past**2).mean(),
        (future**2).mean(),
        past.max(),
        future.max(),
        x[:, 2].mean(),
        x[:, 3].mean(),
        x[:, 4].max(),
        ((past == 0) & (future == 0)).mean(),
    ]
    return np.concatenate([observables(graph), extra, histogram])


class RelationNetwork(nn.Module):
    """Each layer: h + relu(norm(W [h, C h, C^T h, L h, L^T h])), then mean, max and std."""

    def __init__(self, in_channels: int, width: int = 64, layers: int = 4, classes: int = 3):
        super().__init__()
        self.inp = nn.Linear(in_channels, width)
        self.layers = nn.ModuleList(nn.Linear(5 * width, width) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(3 * width, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x, relations, links, mask):
        h, n = self.inp(x), mask.sum(1, keepdim=True)[..., None]
        for layer, norm in zip(self.layers, self.norms, strict=True):
            mixed = [h, relations @ h / n, relations.mT @ h / n, links @ h / 4, links.mT @ h / 4]
            h = (h + torch.relu(norm(layer(torch.cat(mixed, -1))))) * mask[..., None]
        mean = h.sum(1) / n[:, 0]
        top = h.masked_fill(~mask[..., None], -1e9).amax(1)
        spread = ((h - mean[:, None]) ** 2 * mask[..., None]).sum(1).div(n[:, 0]).sqrt()
        return self.head(torch.cat([mean, top, spread], -1))


def padded(graphs, relations):
    size = max(g.num_nodes for g in graphs)
    b = len(graphs)
    x = torch.zeros(b, size, 6)
    related, linked = torch.zeros(b, size, size), torch.zeros(b, size, size)
    mask = torch.zeros(b, size, dtype=torch.bool)
    for i, (g, r) in enumerate(zip(graphs, relations, strict=True)):
        n = g.num_nodes
        x[i, :n], related[i, :n, :n], mask[i, :n] = g.x, r.float(), True
        src, dst = g.edge_index
        linked[i, src[src < dst], dst[src < dst]] = 1.0
    return x, related, linked, mask, torch.cat([g.y for g in graphs])


def network_accuracy(train, train_rel, test, test_rel, epochs: int) -> float:
    torch.manual_seed(0)
    model = RelationNetwork(6)
    optimizer = torch.optim.AdamW(model.parameters(), 2e-3, weight_decay=1e-4)
    steps = epochs * ((len(train) + 31) // 32)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, total_steps=steps)
    for _ in range(epochs):
        model.train()
        shuffled = torch.randperm(len(train)).tolist()
        for start in range(0, len(train), 32):
            order = shuffled[start : start + 32]
            *inputs, y = padded([train[i] for i in order], [train_rel[i] for i in order])
            loss = nn.functional.cross_entropy(model(*inputs), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(test), 128):
            *inputs, y = padded(test[start : start + 128], test_rel[start : start + 128])
            right += int((model(*inputs).argmax(1) == y).sum())
    return right / len(test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-points", nargs=2, type=int, metavar=("MIN", "MAX"))
    parser.add_argument("--graphs", type=int, help="data.num_graphs instead of the config's")
    parser.add_argument("--epochs", type=int, default=15, help="of the relation network")
    args = parser.parse_args()
    overrides = ["log_level=WARNING"]
    if args.num_points:
        overrides.append(f"data.num_points=[{args.num_points[0]},{args.num_points[1]}]")
    if args.graphs:
        overrides.append(f"data.num_graphs={args.graphs}")
    config = qg.load_config(ROOT / "configs" / "curvature.yaml", overrides)
    low, high = config.data.num_points
    size = str(low) if low == high else f"{low}-{high}"
    dataset = dataset_from_config(config.data, progress=False)
    train, _, test = qg.split_dataset(dataset, config.data.split, config.data.seed)
    train, test = list(train), list(test)
    start = time.perf_counter()
    train_rel = [relations_of(g) for g in train]
    test_rel = [relations_of(g) for g in test]
    from sklearn.ensemble import HistGradientBoostingClassifier

    trees = HistGradientBoostingClassifier(max_iter=300, learning_rate=0.05, random_state=0)
    trees.fit(
        np.stack([statistics(g, r) for g, r in zip(train, train_rel, strict=True)]),
        np.array([int(g.y) for g in train]),
    )
    guess = trees.predict(np.stack([statistics(g, r) for g, r in zip(test, test_rel, strict=True)]))
    tree_accuracy = float(np.mean(guess == np.array([int(g.y) for g in test])))
    network = network_accuracy(train, train_rel, test, test_rel, args.epochs)
    print("| elements | training graphs | model | test accuracy |")
    print("|---|---|---|---|")
    print(
        f"| {size} | {len(train)} | gradient-boosted trees on 47 statistics | {tree_accuracy:.4f} |"
    )
    print(
        f"| {size} | {len(train)} | network along every relation, both directions | {network:.4f} |"
    )
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
