"""Counts: the elements in each relation's interval, learnt three ways.

The same small model learns `interval_size`, the elements strictly between the two of each
related pair, on 2D sprinklings of 16-32 elements (`data.pairs: relations`), three ways:

- `regression`: the values on standardised targets, with the mean squared error;
- `count`: the log of the expected count, with the Poisson likelihood; a prediction is its
  exponential;
- softplus: one output through a softplus, with the mean squared error on the raw counts (a
  kind defined here, not one of the library's).

Each run keeps the epoch of the lowest validation MAE and is tested there. Printed per way and
seed: the test MAE, RMSE and Poisson deviance, and the share of test predictions below 0.
Target: no count prediction below 0.

    python bench/counts.py [--graphs 600] [--epochs 50] [--seeds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.config import config_from_dict  # noqa: E402
from QuantumGravPy.tasks.count import Count  # noqa: E402

TASK = "interval_size"


def softplus_mse(outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean squared error of the softplus of the outputs against the counts."""
    return torch.nn.functional.mse_loss(torch.nn.functional.softplus(outputs), target)


class SoftplusCount(Count):
    """A count learnt as one output through a softplus, with the mean squared error."""

    name = "softplus_count"

    def loss_for(self, task):
        return softplus_mse

    def rate(self, outputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(outputs.double())


WAYS = {  # what the table calls each way: the task's type
    "regression": "regression",
    "count (Poisson)": "count",
    "softplus + MSE": SoftplusCount.name,
}


def config(folder: Path, kind: str, seed: int, graphs: int, epochs: int) -> qg.Config:
    return config_from_dict(
        {
            "name": f"counts-{kind}-{seed}",
            "log_level": "WARNING",
            "data": {
                "root": str(folder / "data"),
                "kind": "dimension",
                "dimensions": [2],
                "num_points": [16, 32],
                "num_graphs": graphs,
                "pairs": "relations",
            },
            "model": {"hidden_channels": 32, "num_layers": 3, "head_channels": [32]},
            "training": {
                "path": str(folder / f"{kind}-{seed}"),
                "device": "cpu",
                "num_epochs": epochs,
                "batch_size": 16,
                "seed": seed,  # the data stays the same
                "plots": False,
            },
            "early_stopping": {"metric": "val_mae", "mode": "min", "patience": epochs},
            "tasks": [
                {
                    "name": TASK,
                    "type": kind,
                    "level": "edge",
                    "pairs": "relations_index",
                    "metrics": ["mae", "rmse"],
                }
            ],
        }
    )


def measure(cfg: qg.Config) -> dict[str, float]:
    """Train, test the best epoch; its test figures from the predictions it wrote."""
    trainer = qg.Trainer(cfg)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.run_test(test_loader)
    trainer.close()
    kept = np.load(cfg.run_dir / "test_predictions.npz")
    predicted = kept[f"{TASK}.predicted"].astype(np.float64).reshape(-1)
    true = kept[f"{TASK}.true"].astype(np.float64).reshape(-1)
    error = predicted - true
    positive = np.maximum(predicted, 1e-300)  # the deviance of predictions above 0 only
    ratio = np.where(true > 0, true / positive, 1.0)  # y log(y / mu), 0 where y is 0
    deviance = 2 * (true * np.log(ratio) - true + positive)
    return {
        "mae": float(np.abs(error).mean()),
        "rmse": float(np.sqrt((error**2).mean())),
        "deviance": float(deviance.mean()) if (predicted > 0).all() else math.nan,
        "negative": float((predicted < 0).mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=600, help="causal sets (all splits)")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3, help="runs a way: training.seed 0, 1, ...")
    args = smoke.parse(parser, graphs=40, epochs=1, seeds=1)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    results: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for way, kind in WAYS.items():
                cfg = config(Path(tmp), kind, seed, args.graphs, args.epochs)
                results[way].append(measure(cfg))
    print(f"\n{args.graphs} causal sets of 16-32 elements (2D), {args.epochs} epochs, "
          f"{args.seeds} seed(s); test figures at the epoch of the lowest validation MAE, "
          "mean (and range) over the seeds\n")  # fmt: skip
    print("| way | test MAE | test RMSE | Poisson deviance | predictions below 0 |")
    print("|---|---|---|---|---|")
    for way, runs in results.items():

        def mean(key: str, runs: list = runs) -> float:
            return statistics.fmean(r[key] for r in runs)

        def spread(key: str, runs: list = runs) -> str:  # the mean, and the range of the seeds
            low, high = min(r[key] for r in runs), max(r[key] for r in runs)
            return f"{mean(key):.3f} ({low:.3f}-{high:.3f})"

        deviance = mean("deviance")
        shown = "- (a prediction below 0)" if math.isnan(deviance) else f"{deviance:.3f}"
        print(f"| {way} | {spread('mae')} | {spread('rmse')} | {shown} | "
              f"{100 * mean('negative'):.2f} % |")  # fmt: skip
    negative = statistics.fmean(r["negative"] for r in results["count (Poisson)"])
    met = "met" if negative == 0 else "MISSED"
    print(f"\ncount: {100 * negative:.2f} % of predictions below 0 (target 0 %: {met}); "
          f"{time.perf_counter() - start:.0f} s in all")  # fmt: skip


if __name__ == "__main__":
    main()
