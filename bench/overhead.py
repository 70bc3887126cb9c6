"""Framework overhead: one training epoch of qg.Trainer against a hand-written PyTorch/PyG loop
and against PyTorch Lightning's Trainer.

All three train identical copies of the same model with the same optimizer on the same list of
batches (materialised once, so data loading is out of the comparison). They are timed
alternately, several times, and the ratios of the medians are reported: the machine is shared,
and alternating exposes every side to the same noise. Lightning (a `bench` extra) is skipped
when it is not installed; its epoch is timed from its own epoch-start to epoch-end callbacks, so
its per-fit setup is not counted against it.

    python bench/overhead.py [--graphs 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lightning_helpers  # noqa: E402

import QuantumGravPy as qg  # noqa: E402

TARGET = 1.05


def hand_written_epoch(model, optimizer, batches, device) -> float:
    """The loop a user would write by hand, for reference."""
    model.train()
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
        loss.backward()
        optimizer.step()
        total += loss.item() * batch.num_graphs
        count += batch.num_graphs
    return total / count


class _Iterable:
    """The batches as one iterable (Lightning reads a plain list as a list of loaders)."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)


def lightning_runner(model, optimizer_cls, optimizer_kwargs, batches):
    """A function that trains one epoch with Lightning's Trainer and returns its seconds."""
    if not lightning_helpers.available():
        return None
    module = lightning_helpers.module(model, optimizer_cls, optimizer_kwargs)
    seconds: list[float] = []

    def epoch() -> float:
        trainer = lightning_helpers.trainer(1, seconds, devices=1)
        trainer.fit(module, train_dataloaders=_Iterable(batches))
        return seconds[-1]

    return epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = qg.load_config(
            ROOT / "configs" / "train.yaml",
            [
                f"data.root={ROOT / 'data'}",
                f"data.num_graphs={args.graphs}",
                f"training.batch_size={args.batch_size}",
                f"training.path={tmp}/run",
                "training.device=cpu",
                "log_level=WARNING",
            ],
        )
        trainer = qg.Trainer(config)
        train_loader, _, _ = trainer.prepare_dataloaders()
        batches = list(train_loader)
        model = copy.deepcopy(trainer.model)
        opt = config.training.optimizer
        optimizer_cls = qg.config.resolve(opt.type, key="")
        optimizer = optimizer_cls(model.parameters(), **opt.kwargs)
        lightning = lightning_runner(
            copy.deepcopy(trainer.model), optimizer_cls, opt.kwargs, batches
        )

        # one untimed epoch each to warm up allocators and caches
        trainer.train_epoch(batches)
        hand_written_epoch(model, optimizer, batches, trainer.device)
        if lightning:
            lightning()
        ours, hand, light = [], [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            trainer.train_epoch(batches)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            hand_written_epoch(model, optimizer, batches, trainer.device)
            hand.append(time.perf_counter() - start)
            if lightning:
                light.append(lightning())

    base = statistics.median(hand)
    ratio = statistics.median(ours) / base
    print(
        f"{len(batches)} batches of {args.batch_size} graphs, {args.repeats} alternating "
        f"repeats, torch threads {torch.get_num_threads()}\n"
    )
    print("| loop | s/epoch (median) | / hand-written |")
    print("|---|---|---|")
    print(f"| hand-written PyTorch/PyG loop | {base:.3f} | 1.00 |")
    print(f"| `qg.Trainer` | {statistics.median(ours):.3f} | **{ratio:.2f}** |")
    if light:
        print(
            f"| Lightning `Trainer` | {statistics.median(light):.3f} | "
            f"{statistics.median(light) / base:.2f} |"
        )
    else:
        print("| Lightning `Trainer` | not installed (`pip install -e '.[bench]'`) | |")
    print(
        f"\nqg.Trainer / hand-written: target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
