"""What a learned model has to beat: the best classical method on each embedded kind's test split.

python bench/baselines.py [KIND ...] [--no-train] [--num-points MIN MAX] [--graphs N]

For each kind, on the test split of its shipped config (the same graphs a GNN is tested on;
curvature also at 256 elements, where the sets carry more curvature signal):
- every graph-level kind: a quadratic discriminant, a logistic regression and gradient-boosted
  trees on the observables (fitted on the training split with scikit-learn);
- dimension: also the Myrheim-Meyer estimator (the nearest dimension to the one the ordering
  fraction gives);
- manifold_like: also Myrheim-Meyer alone (a threshold on its estimate, fitted on the training
  split); the score is the F1 of the manifold-like class;
- ricci: node-level R^2 of a regression (gradient boosting) that sees only each element's
  position in the diamond (its past and future sizes, over N).

The observables of a causal set: N, the ordering fraction, links / N, the interval abundances
N_1..N_3 / N, the longest chain, the 2D and 4D Benincasa-Dowker actions / N, and the
Myrheim-Meyer and midpoint dimension estimates. Then the shipped config is trained (its
num_epochs, one process, its own training.seed) and its test metric is printed beside them (not
with --no-train). That is one training seed: on 600 test graphs a GNN's score moves by a few
tenths of a point from one seed to another (bench/readout.py compares two read-outs over
several seeds and a larger test set).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import dataset_from_config  # noqa: E402
from QuantumGravPy.physics import observables as obs  # noqa: E402
from QuantumGravPy.physics import transitive_closure  # noqa: E402

CONFIGS = {
    "dimension": "train.yaml",
    "curvature": "curvature.yaml",
    "manifold_like": "manifold_like.yaml",
    "cset_type": "cset_type.yaml",
    "ricci": "ricci.yaml",
}
HEADLINE = {
    "dimension": "test_accuracy",
    "curvature": "test_accuracy",
    "manifold_like": "test_f1",
    "cset_type": "test_accuracy",
    "ricci": "test_r2",
}


def relations_of(graph) -> torch.Tensor:
    n = graph.num_nodes
    links = torch.zeros(n, n, dtype=torch.bool)
    src, dst = graph.edge_index
    forward = src < dst  # links point forwards in the natural labelling; both directions stored
    links[src[forward], dst[forward]] = True
    return transitive_closure(links)


def observables(graph) -> np.ndarray:
    r = relations_of(graph)
    n = graph.num_nodes
    f = float(obs.ordering_fraction(r))
    counts = obs.interval_abundances(r, 3).double().numpy()
    mm = qg.myrheim_meyer_dimension(min(max(f, 1e-6), 1 - 1e-6))
    return np.array(
        [
            n,
            f,
            counts[0] / n,
            *(counts[1:] / n),
            float(obs.longest_chain(r)),
            float(obs.benincasa_dowker_action(r, 2)) / n,
            float(obs.benincasa_dowker_action(r, 4)) / n,
            mm,
            float(obs.midpoint_dimension(r)),
        ]
    )


def classifiers():
    from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "quadratic discriminant on the observables": make_pipeline(
            StandardScaler(), QuadraticDiscriminantAnalysis(reg_param=1e-3)
        ),
        "logistic regression on the observables": make_pipeline(
            StandardScaler(), LogisticRegression(max_iter=2000)
        ),
        "gradient-boosted trees on the observables": HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, random_state=0
        ),
    }


def score(kind: str, truth: np.ndarray, predicted: np.ndarray) -> float:
    from sklearn.metrics import accuracy_score, f1_score

    if kind == "manifold_like":
        return f1_score(truth, predicted)
    return accuracy_score(truth, predicted)


def graph_baselines(kind, config, train, test) -> list[tuple[str, float]]:
    x_train = np.stack([observables(g) for g in train])
    x_test = np.stack([observables(g) for g in test])
    y_train = np.array([int(g.y) for g in train])
    y_test = np.array([int(g.y) for g in test])
    rows = []
    mm_column = 9
    if kind == "dimension":
        dims = np.array(config.data.dimensions)
        guess = np.abs(x_test[:, mm_column, None] - dims[None]).argmin(1)
        rows.append(("Myrheim-Meyer estimator (nearest dimension)", score(kind, y_test, guess)))
    if kind == "manifold_like":
        estimates = np.unique(x_train[:, mm_column])
        best = max(
            ((t, s) for t in estimates for s in (1, -1)),
            key=lambda ts: np.mean((ts[1] * (x_train[:, mm_column] - ts[0]) > 0) == y_train),
        )
        guess = (best[1] * (x_test[:, mm_column] - best[0]) > 0).astype(int)
        rows.append(
            ("Myrheim-Meyer estimator alone (a fitted threshold)", score(kind, y_test, guess))
        )
    for name, model in classifiers().items():
        model.fit(x_train, y_train)
        rows.append((name, score(kind, y_test, model.predict(x_test))))
    return rows


def ricci_baseline(train, test) -> list[tuple[str, float]]:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.metrics import r2_score

    def positions(graphs):
        x = np.concatenate([g.x[:, :2].numpy() for g in graphs])  # past and future sizes / N
        y = np.concatenate([g.ricci.numpy() for g in graphs])
        return x, y

    x_train, y_train = positions(train)
    x_test, y_test = positions(test)
    model = HistGradientBoostingRegressor(max_iter=300).fit(x_train, y_train)
    return [
        (
            "regression on each element's past and future sizes",
            r2_score(y_test, model.predict(x_test)),
        )
    ]


EXTRA_SIZES = {"curvature": [(256, 256)]}  # also measured at these sizes (num_points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="*", default=list(CONFIGS), metavar="KIND")
    parser.add_argument("--no-train", action="store_true", help="the baselines alone")
    parser.add_argument(
        "--num-points", nargs=2, type=int, metavar=("MIN", "MAX"), help="this size only"
    )
    parser.add_argument("--graphs", type=int, help="data.num_graphs instead of the config's")
    args = parser.parse_args()
    print("| kind | elements | method | test score | |")
    print("|---|---|---|---|---|")
    for kind in args.kinds:
        sizes = [tuple(args.num_points)] if args.num_points else [None, *EXTRA_SIZES.get(kind, [])]
        for size in sizes:
            overrides = ["log_level=WARNING", f"training.path=runs/baselines/{kind}"]
            if size:
                overrides.append(f"data.num_points=[{size[0]},{size[1]}]")
            if args.graphs:
                overrides.append(f"data.num_graphs={args.graphs}")
            measure(kind, qg.load_config(ROOT / "configs" / CONFIGS[kind], overrides), args)


def measure(kind: str, config, args) -> None:
    """The baselines of one kind at one size, and the GNN of its config unless --no-train."""
    low, high = config.data.num_points
    size = str(low) if low == high else f"{low}-{high}"
    dataset = dataset_from_config(config.data, progress=False)
    train, _, test = qg.split_dataset(dataset, config.data.split, config.data.seed)
    metric = HEADLINE[kind].removeprefix("test_")
    start = time.perf_counter()
    rows = (
        ricci_baseline(train, test)
        if kind == "ricci"
        else graph_baselines(kind, config, train, test)
    )
    for name, value in rows:
        print(f"| {kind} | {size} | {name} | {metric} {value:.4f} | |", flush=True)
    if not args.no_train:
        trainer = qg.Trainer(config, overwrite=True)
        loaders = trainer.prepare_dataloaders()
        trainer.run_training(*loaders[:2])
        value = trainer.run_test(loaders[2])[HEADLINE[kind]]
        trainer.close()
        best = max(v for _, v in rows)
        print(
            f"| {kind} | {size} | **the GNN of configs/{CONFIGS[kind]}** | {metric} {value:.4f} | "
            f"{value - best:+.4f} against the best baseline |",
            flush=True,
        )
    print(f"{kind} at {size}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
