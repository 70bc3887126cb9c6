"""Framework overhead: one training epoch of qg.Trainer against a hand-written PyTorch/PyG loop
and against PyTorch Lightning's Trainer; and the cost of training three tasks at once.

All three train identical copies of the same model with the same optimizer on the same list of
batches (materialised once, so data loading is out of the comparison). They are timed
alternately, several times, and the ratios of the medians are reported: the machine is shared,
and alternating exposes every side to the same noise. Lightning (a `bench` extra) is skipped
when it is not installed; its epoch is timed from its own epoch-start to epoch-end callbacks, so
its per-fit setup is not counted against it.

The second table trains the same data with three tasks (the dimension as a class and as a
number, and each element's time coordinate: two extra heads, one of them on every node)
against the single default task, timed alternately in the same way.

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
import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402

TARGET = 1.05
TASKS_TARGET = 1.15
THREE_TASKS = (
    "tasks=[{name: dim, target: y}, {name: d, type: regression, target: dimension}, "
    "{name: time, type: regression, level: node}]"
)


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
    args = smoke.parse(parser, graphs=200, repeats=1)

    with tempfile.TemporaryDirectory() as tmp:

        def load(*overrides: str) -> qg.Config:
            return qg.load_config(
                ROOT / "configs" / "train.yaml",
                [
                    f"data.root={ROOT / 'data'}",
                    f"data.num_graphs={args.graphs}",
                    f"training.batch_size={args.batch_size}",
                    f"training.path={tmp}/run",
                    "training.device=cpu",
                    "log_level=WARNING",
                    *overrides,
                ],
            )

        config = load()
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

        # three tasks against one, on the same batches
        three = qg.Trainer(load(THREE_TASKS))
        # its loader (the regression targets' scaling): the same graphs, batches holding the
        # three tasks' targets (the one-task trainer's hold only what it reads)
        shared = list(three.prepare_dataloaders()[0])
        three.train_epoch(shared)
        one, many = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            trainer.train_epoch(shared)
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            three.train_epoch(shared)
            many.append(time.perf_counter() - start)

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
    tasks_ratio = statistics.median(many) / statistics.median(one)
    print("\n| tasks | s/epoch (median) | / one task |")
    print("|---|---|---|")
    print(f"| one (dimension class) | {statistics.median(one):.3f} | 1.00 |")
    print(
        f"| three (class, dimension, time of each element) | {statistics.median(many):.3f} | "
        f"**{tasks_ratio:.2f}** |"
    )
    verdict = "met" if tasks_ratio <= TASKS_TARGET else "MISSED"
    print(f"\nthree tasks / one task: target <= {TASKS_TARGET}: {verdict}")


if __name__ == "__main__":
    main()
