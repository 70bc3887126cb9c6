"""The cost of looking inside: training epochs with the monitor's defaults against none of it.

The defaults are `monitor.timing: true` (a clock read at each part of each step, the gradient
exchange timed through DDP's communication hook, each rank's row carried by the gather the
trainer makes at every epoch's end anyway), the global gradient norm and the non-finite check
of every step, and the replica checksums every 200 steps. The
baseline is the same trainer with a monitor that does nothing (and, under DDP, the unwrapped
communication hook): one trainer switches its monitor on and off from epoch to epoch, so
that both sides train the same model on the same batches (two trainers differed by more than
the effect measured, from where their memory happened to lie; and the batches are not
reshuffled between epochs, so that every epoch does the same work). It trains the shipped
config's model on the real training loader, data loading included, as a user runs it: one
process, and two processes at the same global batch (a barrier before each epoch). Epochs
with and without alternate in pairs, many times; reported are the ratio of the medians, the
median of the pairs' ratios, and the time spent inside the monitor's own code (its methods
and its part of the communication hook, timed directly) as a share of the epoch.

    python bench/monitor.py [--graphs 2000] [--repeats 41]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402
from QuantumGravPy.training import monitor, trainer  # noqa: E402

TARGET = 1.02


def _timed(method):
    """``method`` of the real monitor while ``on``, its own time added to ``spent``."""

    def call(self, *args, **kwargs):
        if not self.on:
            return None
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.spent += time.perf_counter() - start

    return call


class Switchable(monitor.Monitor):
    """The real monitor while ``on``; otherwise everything it adds to the loop is skipped (the
    baseline), so that one trainer can alternate between the two from epoch to epoch. While on,
    ``spent`` adds up the time spent inside the monitor itself."""

    on = True
    spent = 0.0
    start_epoch = _timed(monitor.Monitor.start_epoch)
    lap = _timed(monitor.Monitor.lap)
    check_replicas = _timed(monitor.Monitor.check_replicas)

    def phase(self, part: str):
        return super().phase(part) if self.on else contextlib.nullcontext()

    def wrap_hook(self, hook):
        inner = {"seconds": 0.0}

        def timed_hook(state, bucket):
            start = time.perf_counter()
            try:
                return hook(state, bucket)
            finally:
                inner["seconds"] += time.perf_counter() - start

        wrapped = super().wrap_hook(timed_hook)

        def switch(state, bucket):
            if not self.on:
                return hook(state, bucket)
            start, before = time.perf_counter(), inner["seconds"]
            try:
                return wrapped(state, bucket)
            finally:  # the wrapper's own time: all of it but the exchange it wraps
                self.spent += time.perf_counter() - start - (inner["seconds"] - before)

        return switch

    def gradients_ok(self, sums, step, epoch, scaled) -> bool:
        if not self.on:
            return True
        return _timed(monitor.Monitor.gradients_ok)(self, sums, step, epoch, scaled)

    def end_epoch(self, *, epoch: int):
        if not self.on:
            return {}, None
        return _timed(monitor.Monitor.end_epoch)(self, epoch=epoch)


def epoch_seconds(t, loader, on: bool) -> tuple[float, float]:
    """(the epoch's seconds, of which inside the monitor)."""
    t.monitor.on, t.monitor.spent = on, 0.0
    distributed.barrier()
    start = time.perf_counter()
    t.monitor.start_epoch()
    t.train_epoch(loader)  # the same batches, in the same order, every epoch
    t.monitor.end_epoch(epoch=t.epoch + 1)
    return time.perf_counter() - start, t.monitor.spent


def compare(rank: int, world_size: int, config: qg.Config, repeats: int) -> dict[str, list]:
    real = trainer.Monitor
    trainer.Monitor = Switchable  # the trainer builds its monitor (and DDP its hook) with it
    try:
        t = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    finally:
        trainer.Monitor = real
    loader, _, _ = t.prepare_dataloaders()
    t.on_epoch_start(loader)
    epoch_seconds(t, loader, True)  # warm-up
    epoch_seconds(t, loader, False)
    pairs = []
    for i in range(repeats):
        first = i % 2 == 0
        a, b = epoch_seconds(t, loader, first), epoch_seconds(t, loader, not first)
        pairs.append((a, b) if first else (b, a))  # (with the monitor, without)
    t.close()
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:

        def load(*extra: str) -> qg.Config:
            return qg.load_config(
                ROOT / "configs" / "train.yaml",
                [
                    f"data.root={ROOT / 'data'}",
                    f"data.num_graphs={args.graphs}",
                    f"training.path={tmp}/run",
                    "training.device=cpu",
                    "log_level=WARNING",
                    *extra,
                ],
            )

        qg.prepare_run(load(), overwrite=True)  # the data cache, built once
        rows = []
        for world_size, batch in ((1, 32), (2, 16)):  # the same global batch
            run = load(f"training.batch_size={batch}", "parallel.backend=gloo")
            pairs = qg.spawn(compare, world_size, run, args.repeats, backend="gloo")[0]
            rows.append((world_size, pairs))
    print(
        f"{args.graphs} graphs (70 % of them trained on), the shipped model; {args.repeats} "
        "pairs of adjacent epochs with and without the monitor, in alternating order; rank 0's "
        "times\n"
    )
    print(
        "| processes | s/epoch, no monitor | s/epoch, the defaults | ratio of medians | "
        "median ratio of pairs | inside the monitor |"
    )
    print("|---|---|---|---|---|---|")
    verdicts, inside_verdicts = [], []
    for world_size, pairs in rows:
        on = statistics.median(a for (a, _), _ in pairs)
        off = statistics.median(b for _, (b, _) in pairs)
        paired = statistics.median(a / b for (a, _), (b, _) in pairs)
        inside = statistics.median(spent / a for (a, spent), _ in pairs)
        verdicts.append(on / off <= TARGET)
        inside_verdicts.append(inside <= TARGET - 1)
        print(
            f"| {world_size} | {off:.3f} | {on:.3f} | **{on / off:.3f}** | {paired:.3f} | "
            f"{inside:.2%} of the epoch |"
        )
    for name, ok in (
        ("the defaults / no monitor (ratio of medians)", verdicts),
        ("inside the monitor, as a share of the epoch", inside_verdicts),
    ):
        limit = f"<= {TARGET}" if "ratio" in name else f"<= {TARGET - 1:.0%}"
        print(f"\n{name}: target {limit}: {'met' if all(ok) else 'MISSED'}")


if __name__ == "__main__":
    main()
