"""Train the dimension classifier from Python instead of the command line.

    python examples/train_single_process.py [--config configs/train.yaml] [key=value ...]

The same steps as ``qg train``: load and validate the config, build the trainer (which builds or
loads the cached dataset and the model), split the data, train, and test the best checkpoint.
"""

import argparse
import sys

import QuantumGravPy as qg


def main() -> None:
    parser = argparse.ArgumentParser(description="Single-process training with qg.Trainer")
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()

    config = qg.load_config(args.config, args.overrides)
    trainer = qg.Trainer(config, overwrite=args.overwrite)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    metrics = trainer.run_test(test_loader)
    trainer.close()

    best = max(history, key=lambda row: row["val_accuracy"])
    print(
        f"{len(history)} epochs; best validation accuracy {best['val_accuracy']:.3f} "
        f"at epoch {best['epoch']}; test accuracy {metrics['test_accuracy']:.3f}"
    )
    print(f"history, summary and checkpoints are in {config.run_dir}")


if __name__ == "__main__":
    try:
        main()
    except qg.QGError as e:  # a mistake in the config or paths: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None  # as qg does
