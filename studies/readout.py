"""The default model's read-out: mean and spread against mean, maximum and a scaled sum.

The shipped dimension classifier (`configs/train.yaml`) pools each graph's node embeddings by
their mean and standard deviation; before, by mean, maximum and the sum divided by the square
root of the number of nodes (`scaled_add`), whose scale grows with the graph (the untrained
model's first loss 6.6 times chance at 2,048 elements; the maximum alone 1.5 times:
`bench/scale.py`). This trains the shipped config as shipped and with the read-outs it had
before (both at learning rate 0.005), with several training seeds each, and reports for both:
the loss of the untrained model on the validation split (chance for three classes:
ln 3 = 1.10), the accuracy on the config's own test split (600 graphs), and the accuracy on a
fresh, larger set of causal sets generated with another seed, which resolves differences the
600 graphs cannot. Means over the seeds, with the standard error of the paired difference.

    python studies/readout.py [--seeds 5] [--fresh 8000]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402

VARIANTS = {
    "mean, std (shipped)": ["model.pooling=[mean,std]"],
    "mean, max, scaled_add (before)": ["model.pooling=[mean,max,scaled_add]"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--fresh", type=int, default=8000, help="graphs of the fresh set")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        base = [f"data.root={ROOT / 'data'}", "log_level=WARNING", "training.device=cpu"]
        fresh = [
            "data.seed=7",
            f"data.num_graphs={args.fresh}",
            "data.split=[0.01,0.01,0.98]",
        ]
        for seed in range(args.seeds):
            for variant, (name, overrides) in enumerate(VARIANTS.items()):
                run = f"{tmp}/{variant}-{seed}"
                config = qg.load_config(
                    ROOT / "configs" / "train.yaml",
                    [*base, *overrides, f"training.seed={seed}", f"training.path={run}"],
                )
                trainer = qg.Trainer(config)
                train, val, test = trainer.prepare_dataloaders()
                untrained = trainer.validator.evaluate(trainer.model, val)["val_loss"]
                trainer.run_training(train, val)
                accuracy = trainer.run_test(test)["test_accuracy"]
                trainer.close()
                other = qg.load_config(
                    ROOT / "configs" / "train.yaml",
                    [*base, *overrides, *fresh, f"training.path={run}-fresh"],
                )
                judge = qg.Trainer(other)
                best = Path(run) / "checkpoints" / "best.pt"
                unseen = judge.run_test(judge.prepare_dataloaders()[2], checkpoint=best)
                judge.close()
                results[name].append((untrained, accuracy, unseen["test_accuracy"]))
                print(f"{name}, seed {seed}: {results[name][-1]}", file=sys.stderr, flush=True)
    fresh_graphs = args.fresh - 2 * round(0.01 * args.fresh)
    print(
        f"{args.seeds} training seeds each; test split 600 graphs; fresh set {fresh_graphs} "
        "graphs (data.seed 7)\n"
    )
    print("| read-out | untrained loss | test split accuracy | fresh set accuracy |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        columns = [statistics.mean(r[i] for r in rows) for i in range(3)]
        print(f"| {name} | {columns[0]:.2f} | {columns[1]:.4f} | {columns[2]:.4f} |")
    (shipped, before) = results.values()
    for i, label in ((1, "test split"), (2, "fresh set")):
        differences = [a[i] - b[i] for a, b in zip(shipped, before, strict=True)]
        mean = statistics.mean(differences)
        se = (
            statistics.stdev(differences) / math.sqrt(len(differences))
            if len(differences) > 1
            else math.nan
        )
        print(
            f"\nshipped - before, {label}: {mean * 100:+.2f} points (standard error {se * 100:.2f})"
        )


if __name__ == "__main__":
    main()
