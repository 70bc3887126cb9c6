"""How far results depend on the number of processes, in float32 and float64; and what the
full-state checkpoints cost.

The shipped config (`configs/train.yaml`) on a smaller dataset, under the world-size conditions
of the README (`drop_last: true`, no dropout, per-graph normalisation, per-sample augmentation
seeding), trained with 1 process at batch 8, 2 at batch 4 and 4 at batch 2: the same global
batches. Printed: the largest difference of any weight from the 1-process run after each epoch,
for `training.precision` 32 and 64 (extra `key=value` overrides may follow `--`). Then the
time and size of one `last.pt` write against the epoch time of the 1-process float32 run.

    python bench/invariance.py [--epochs 4] [--graphs 600]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.parallel import spawn  # noqa: E402


def train_weights(rank: int, world_size: int, config: qg.Config) -> list[dict]:
    """The weights after every epoch."""
    trainer = qg.TrainerDDP(rank, config)
    snapshots = []
    end_epoch = trainer.end_epoch

    def end_epoch_and_keep(row, improved):
        end_epoch(row, improved)
        snapshots.append(
            {k: v.detach().double().clone() for k, v in trainer.model.state_dict().items()}
        )

    trainer.end_epoch = end_epoch_and_keep
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return snapshots


def max_difference(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--graphs", type=int, default=600)
    args, _ = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = [
            f"data.root={ROOT / 'data'}",
            f"data.num_graphs={args.graphs}",
            f"training.num_epochs={args.epochs}",
            "training.drop_last=true",
            "training.device=cpu",
            "training.checkpoint_every=0",
            "augmentation.preset=mild",
            *(sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []),
            "early_stopping.enabled=false",
            "log_level=WARNING",
        ]
        print(
            f"Largest weight difference from 1 process x batch 8, {args.epochs} epochs on "
            f"{args.graphs} graphs ({platform.machine()})\n"
        )
        epochs = range(1, args.epochs + 1)
        print(
            "| precision | processes x batch | "
            + " | ".join(f"epoch {e}" for e in epochs)
            + " |\n|---|---|"
            + "---|" * args.epochs
        )
        for precision in ("32", "64"):
            results = {}
            for world_size, batch in ((1, 8), (2, 4), (4, 2)):
                config = qg.load_config(
                    ROOT / "configs" / "train.yaml",
                    [
                        *base,
                        f"training.precision={precision}",
                        f"training.batch_size={batch}",
                        f"training.path={tmp}/p{precision}-w{world_size}",
                    ],
                )
                results[world_size] = spawn(train_weights, world_size, config, backend="gloo")[0]
            for world_size, batch in ((2, 4), (4, 2)):
                differences = [
                    max_difference(mine, reference)
                    for mine, reference in zip(results[world_size], results[1], strict=True)
                ]
                print(
                    f"| {precision} | {world_size} x {batch} | "
                    + " | ".join(f"{d:.0e}" for d in differences)
                    + " |"
                )

        config = qg.load_config(
            ROOT / "configs" / "train.yaml",
            [*base, "training.batch_size=32", f"training.path={tmp}/checkpoint"],
        )
        trainer = qg.Trainer(config)
        history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
        seconds = []
        for _ in range(10):
            start = time.perf_counter()
            path = trainer.save_checkpoint("last.pt")
            seconds.append(time.perf_counter() - start)
        trainer.close()
        epoch = statistics.median(row["epoch_seconds"] for row in history)
        write = statistics.median(seconds)
        print()
        print(
            f"last.pt: {path.stat().st_size / 1024:.0f} KiB, written (with fsync) in "
            f"{write * 1000:.1f} ms = {100 * write / epoch:.1f}% of a "
            f"{epoch * 1000:.0f} ms epoch"
        )


if __name__ == "__main__":
    main()
