"""training.compile on this CPU: a training epoch of the shipped model, compiled and not.

One process, the shipped config (`configs/train.yaml`, 2,000 graphs, batch 32): two trainers,
one with `training.compile: true`, their epochs alternating; the first epoch of each (which
compiles) is timed apart, and the others' medians compared. torch.compile fuses the model's
small operations into generated C++ kernels; on a CPU, for a model whose work is a few matrix
products and scatters per layer, little gain is expected, and the compile costs tens of
seconds once per process (less when torch's cache holds the kernels from an earlier run).

    python bench/compile.py [--epochs 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--graphs", type=int, default=2000)
    args = smoke.parse(parser, epochs=1, graphs=100)
    with tempfile.TemporaryDirectory() as tmp:
        trainers, loaders, first, times = {}, {}, {}, {}
        for compiled in (False, True):
            config = qg.load_config(
                ROOT / "configs" / "train.yaml",
                [f"data.root={tmp}/data", f"data.num_graphs={args.graphs}",
                 f"training.path={tmp}/{compiled}", "training.device=cpu", "log_level=WARNING",
                 f"training.compile={compiled}"],
            )  # fmt: skip
            trainers[compiled] = qg.Trainer(config)
            loaders[compiled] = trainers[compiled].prepare_dataloaders()[0]
            loaders[compiled].sampler.set_epoch(0)
            start = time.perf_counter()
            trainers[compiled].train_epoch(loaders[compiled])
            first[compiled] = time.perf_counter() - start
            times[compiled] = []
        for i in range(args.epochs):
            for compiled in (False, True) if i % 2 == 0 else (True, False):
                start = time.perf_counter()
                trainers[compiled].train_epoch(loaders[compiled])
                times[compiled].append(time.perf_counter() - start)
    plain, fast = statistics.median(times[False]), statistics.median(times[True])
    print(f"One process, the shipped model, {round(args.graphs * 0.7):,} training graphs, "
          f"batch 32; medians of {args.epochs} alternating epochs after the first\n")  # fmt: skip
    print("| training.compile | first epoch (s) | later epochs (s) | later / uncompiled |")
    print("|---|---|---|---|")
    for compiled, median in ((False, plain), (True, fast)):
        print(f"| {str(compiled).lower()} | {first[compiled]:.2f} | {median:.3f} | "
              f"{median / plain:.2f} |")  # fmt: skip
    print(f"\n- compiling took about {first[True] - first[False]:.0f} s more in the first epoch")


if __name__ == "__main__":
    main()
