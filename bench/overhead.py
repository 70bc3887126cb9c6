"""Framework overhead: one training epoch of qg.Trainer against a hand-written PyTorch/PyG loop.

Both train identical copies of the same model with the same optimizer on the same list of
batches (materialised once, so data loading is out of the comparison). The two are timed
alternately, several times, and the ratio of the medians is reported: the machine is shared,
and alternating exposes both sides to the same noise.

    python bench/overhead.py [--graphs 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
        optimizer = qg.config.resolve(opt.type, key="")(model.parameters(), **opt.kwargs)

        # one untimed epoch each to warm up allocators and caches
        trainer.train_epoch(batches)
        hand_written_epoch(model, optimizer, batches, trainer.device)
        ours, hand = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            trainer.train_epoch(batches)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            hand_written_epoch(model, optimizer, batches, trainer.device)
            hand.append(time.perf_counter() - start)

    ratio = statistics.median(ours) / statistics.median(hand)
    print(f"machine: {platform.machine()}, torch threads {torch.get_num_threads()}")
    print(f"{len(batches)} batches of {args.batch_size} graphs, {args.repeats} alternating repeats")
    print(f"hand-written loop  median {statistics.median(hand):.3f} s/epoch")
    print(f"qg.Trainer         median {statistics.median(ours):.3f} s/epoch")
    print(f"ratio {ratio:.3f}  (target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'})")


if __name__ == "__main__":
    main()
