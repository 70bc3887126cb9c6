"""A listener of your own: keep each new best checkpoint outside the run directory.

    python examples/best_copies.py --folder safe/ [key=value ...]

A listener is told of a run's points: ``on_train_start``, ``on_epoch_start``, ``on_epoch_end``,
``on_checkpoint``, ``on_train_end`` and ``on_test_end``. The library's own epoch work (early
stopping, the monitor's columns, the records, the checkpoints) is done by listeners too; the
ones named in ``training.callbacks`` are told last, so they see the finished row and the
files of the epoch. This one copies ``best.pt`` to ``--folder`` each time an epoch is the best so
far, and keeps the best row beside it as JSON. It runs on the first process only (the one that
writes checkpoints), whatever the number of processes.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import QuantumGravPy as qg

ROOT = Path(__file__).resolve().parent.parent


class BestCopies(qg.Listener):
    """Copies of the best checkpoint in ``folder``, named after the run: ``<run>-best.pt`` and
    ``<run>-best.json`` (the best epoch's history row)."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_train_start(self, trainer: qg.Trainer) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def on_checkpoint(self, trainer: qg.Trainer, path: Path) -> None:
        if path.name == "best.pt":
            shutil.copyfile(path, self.folder / f"{trainer.run_dir.name}-best.pt")

    def on_epoch_end(self, trainer: qg.Trainer, row: dict) -> None:
        if trainer.state.improved:  # early stopping's decision, made before this listener
            best = self.folder / f"{trainer.run_dir.name}-best.json"
            best.write_text(json.dumps(row, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="Train with a listener of your own")
    parser.add_argument("--folder", default="runs/best-copies", help="where the copies go")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    listener = {"type": "best_copies.BestCopies", "kwargs": {"folder": args.folder}}
    config = qg.load_config(
        ROOT / "configs" / "train.yaml",
        [
            "training.path=runs/best-copies-run",
            f"training.callbacks=[{json.dumps(listener)}]",
            *args.overrides,
        ],
    )
    if args.world_size > 1:
        qg.launch(config, world_size=args.world_size, overwrite=args.overwrite)
    else:
        trainer = qg.Trainer(config, overwrite=args.overwrite)
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        trainer.run_test(test_loader)
        trainer.close()
    best = json.loads((Path(args.folder) / f"{config.run_dir.name}-best.json").read_text())
    print(f"best epoch {best['epoch']}: val_loss {best['val_loss']:.4f}, copied to {args.folder}")


if __name__ == "__main__":
    try:
        main()
    except qg.QGError as e:  # a mistake in the config or paths: one line, no traceback
        raise SystemExit(f"error: {e}") from None
