"""Your own model for several tasks at once: a GIN network with one head per task.

    python examples/custom_multitask_model.py [--world-size 2] [key=value ...]

It trains ``configs/multitask.yaml`` (the dimension as a class and as a number, and every
element's time coordinate) with the model below instead of the built-in one. What a model needs
to fit in: ``__init__(in_channels, outputs, **model.kwargs)``, where ``outputs`` maps each task's
name to ``(num_outputs, level)``, and ``forward(batch)`` returning ``{task: tensor}`` with one
row per graph (level ``"graph"``) or per node (``"node"``). Everything else (DDP, checkpoints,
resuming, ``qg test``, metrics, pictures) is the trainer's. The config names the class by its
import path, so every process of a distributed job can build it: this file's directory is on
the path when it runs, so ``custom_multitask_model.MultiTaskGIN`` is importable.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool

import QuantumGravPy as qg

ROOT = Path(__file__).resolve().parent.parent


class MultiTaskGIN(nn.Module):
    """GIN layers shared by every task; graph heads on [mean, sum] pooling, node heads per node."""

    def __init__(self, in_channels: int, outputs: dict, hidden: int = 64, layers: int = 3):
        super().__init__()
        self.levels = {task: level for task, (_, level) in outputs.items()}
        self.encode = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)))
            for _ in range(layers)
        )
        self.heads = nn.ModuleDict(
            {
                task: nn.Sequential(
                    nn.Linear(2 * hidden if level == "graph" else hidden, hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, n),
                )
                for task, (n, level) in outputs.items()
            }
        )

    def forward(self, batch) -> dict[str, torch.Tensor]:
        x = self.encode(batch.x)
        for conv in self.convs:
            x = x + conv(x, batch.edge_index).relu()
        pooled = torch.cat(
            [
                global_mean_pool(x, batch.batch, batch.num_graphs),
                global_add_pool(x, batch.batch, batch.num_graphs) / 64,  # sizes are ~32-64
            ],
            dim=-1,
        )
        return {
            task: head(pooled if self.levels[task] == "graph" else x)
            for task, head in self.heads.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="A custom multi-task model")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()

    config = qg.load_config(
        ROOT / "configs" / "multitask.yaml",
        [
            "model.type=custom_multitask_model.MultiTaskGIN",
            "model.kwargs={hidden: 64, layers: 3}",
            "training.path=runs/custom-multitask",
            *args.overrides,
        ],
    )
    if args.world_size > 1:
        result = qg.launch(config, world_size=args.world_size, overwrite=args.overwrite)
        test = result["test"]
    else:
        trainer = qg.Trainer(config, overwrite=args.overwrite)
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        test = trainer.run_test(test_loader)
        trainer.close()
    for task in ("dim", "d", "time"):
        scores = {k.removeprefix(f"test_{task}_"): v for k, v in test.items()}
        if task == "dim":
            print(
                f"dimension class: accuracy {scores['accuracy']:.3f}, F1 {scores['f1_macro']:.3f}"
            )
        else:
            name = "dimension" if task == "d" else "time of each element"
            rmse = scores.get("rmse", scores["mse"] ** 0.5)
            print(f"{name}: RMSE {rmse:.3f}, R^2 {scores['r2']:.3f}")
    print(f"history, summary, predictions and pictures are in {config.run_dir}")


if __name__ == "__main__":
    try:
        main()
    except qg.QGError as e:  # a mistake in the config or paths: one line, no traceback
        raise SystemExit(f"error: {e}") from None
