"""One thread per process: what pinning costs where results must not depend on the number of
processes.

python bench/threads.py [--rounds 3]

The invariant strategy and `qg predict` compute on one CPU thread per process, because a CPU
kernel may split a sum by the thread count, which changes with the number of processes sharing a
machine (docs/reproducibility.md). Timed in one process, alternating: an invariant training
epoch of the shipped config (`configs/train.yaml`, 1,536 training graphs of 32-64 elements,
global batch 384 in 12 micro-batches) on one thread against the same epoch on every core, and
prediction with the shipped model on causal sets of the field's size (64 2D sprinklings of
1,024 elements, batches of 8) on one thread against every core. Medians over the rounds
(training: the first epoch of each run left out); the ratio is the cost of pinning here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.config import (  # noqa: E402
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
)
from QuantumGravPy.parallel.strategies.invariant import InvariantStrategy  # noqa: E402


def invariant_epochs(config: qg.Config, *, pinned: bool) -> list[float]:
    """The epoch times of an invariant run, on one thread or on every core."""
    InvariantStrategy.one_thread = pinned
    try:
        trainer = qg.Trainer(config, overwrite=True)
        history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
        trainer.close()
    finally:
        InvariantStrategy.one_thread = True
    return [row["epoch_seconds"] for row in history[1:]]


def predict_seconds(model: torch.nn.Module, batches: list, threads: int) -> float:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        with torch.no_grad():
            for batch in batches:
                model(batch)
        return time.perf_counter() - start
    finally:
        torch.set_num_threads(before)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--large", type=int, default=64, help="causal sets of 1,024 elements")
    args = smoke.parse(parser, rounds=1, graphs=500, large=8)
    cores = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        base = load_config(ROOT / "configs" / "train.yaml")
        raw = apply_overrides(
            config_to_dict(base),
            [
                f"data.root={tmp}/data",
                f"training.path={tmp}/run",
                f"data.num_graphs={args.graphs}",
                "data.split=[0.768, 0.116, 0.116]",
                "parallel.strategy=invariant",
                "training.global_batch_size=384",
                "parallel.invariant.micro_batches=12",
                "training.num_epochs=3",
                "early_stopping.enabled=false",
                "log_level=WARNING",
            ],
        )
        config = config_from_dict(raw)
        training: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for pinned in (True, False):
                training[pinned] += invariant_epochs(config, pinned=pinned)

        from torch_geometric.data import Batch

        from QuantumGravPy.data import dataset_from_config

        model = qg.load_model(config.run_dir).model
        large = config_from_dict(
            apply_overrides(
                raw,
                [
                    f"data.root={tmp}/large",
                    f"data.num_graphs={args.large}",
                    "data.num_points=[1024, 1024]",
                    "data.dimensions=[2]",
                ],
            )
        )
        dataset = dataset_from_config(large.data, progress=False)
        graphs = [dataset[i] for i in range(len(dataset))]
        batches = [Batch.from_data_list(graphs[i : i + 8]) for i in range(0, len(graphs), 8)]
        predicting: dict[int, list[float]] = {1: [], cores: []}
        predict_seconds(model, batches, 1)  # warm-up
        for _ in range(args.rounds):
            for threads in (1, cores):
                predicting[threads].append(predict_seconds(model, batches, threads))

    one, all_ = statistics.median(training[True]), statistics.median(training[False])
    print(f"### One thread against {cores} on this machine\n")
    print("| work | one thread | every core | one thread / every core |")
    print("|---|---|---|---|")
    print(
        f"| invariant training epoch ({round(args.graphs * 0.768):,} graphs of 32-64 elements, 1 "
        f"process) | {one:.2f} s "
        f"| {all_:.2f} s | {one / all_:.2f}x |"
    )
    p1, pn = statistics.median(predicting[1]), statistics.median(predicting[cores])
    print(
        f"| predicting {args.large} causal sets of 1,024 elements (batches of 8) | {p1:.2f} s "
        f"| {pn:.2f} s | {p1 / pn:.2f}x |"
    )
    print(
        "\nOn this machine every core is "
        f"{cores} threads; with W processes on it each has {cores} / W, and one from W = "
        f"{cores} on: pinning costs nothing once the processes fill the cores."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
