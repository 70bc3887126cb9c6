"""The cost of looking inside: training steps with the monitor's defaults against none of it.

The defaults are `monitor.timing: true` (a clock read at each part of one step in eight, the
gradient exchange timed through DDP's communication hook, each rank's row carried by the gather
the trainer makes at every epoch's end anyway), the global gradient norm and the non-finite check
of every step, and the replica checksums every 200 steps. The baseline is the same trainer with
a monitor that does nothing (and, under DDP, the unwrapped communication hook). One trainer
switches its monitor on and off every 4 steps, so that both sides train the same model on the
same batches, a few tens of milliseconds apart (this machine's speed drifts by 10 % from one
epoch to the next, more than the effect measured); the next epoch switches the other way
round, so that every block of batches is timed both ways (the batches are not reshuffled
between epochs). It trains the shipped config's model on the real training loader, data loading
included, as a user runs it: one process, and two processes at the same global batch, each on
a core of its own. Each block's time is divided by the median time of its place in the epoch
(blocks hold different graphs), and the ratio of the medians of these, with the monitor and
without, is the per-step cost; the monitor's work once per epoch (its start and its end) is
timed directly and added, as a share of the epoch. Two more columns: the noise (the same ratio
between two halves of the blocks without the monitor: what this machine's drift alone makes of
it), and the time spent inside the monitor's own code (its methods and its part of the
communication hook, timed directly).

    python bench/monitor.py [--graphs 2000] [--epochs 80]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.parallel import distributed  # noqa: E402
from QuantumGravPy.training.loop import parts  # noqa: E402
from QuantumGravPy.training.monitoring import monitor  # noqa: E402

TARGET = 0.02  # of the epoch time
BLOCK = 4  # steps


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
    baseline). It switches itself every ``BLOCK`` steps, and records each block's time, whether
    it was on, and the time spent inside the monitor itself."""

    on = True
    spent = 0.0
    start_epoch = _timed(monitor.Monitor.start_epoch)
    check_replicas = _timed(monitor.Monitor.check_replicas)
    _lap = _timed(monitor.Monitor.lap)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (the epoch, the block's place in it, on, seconds, inside the monitor)
        self.blocks: list[tuple[int, int, bool, float, float]] = []
        self._epoch = -1

    def begin(self, first_on: bool) -> None:
        """A new epoch: its first block on or off."""
        self.on, self._steps_done, self._epoch = first_on, 0, self._epoch + 1
        self._block_start, self._block_spent = time.perf_counter(), self.spent

    def lap(self, part: str) -> None:
        self._lap(part)

    def _count_step(self) -> None:
        """A step reached its gradient check (every step does, before its update): a block
        ends with its last step's check."""
        self._steps_done += 1
        if self._steps_done % BLOCK == 0:
            now = time.perf_counter()
            block = (self.on, now - self._block_start, self.spent - self._block_spent)
            self.blocks.append((self._epoch, self._steps_done // BLOCK - 1, *block))
            self.on = not self.on
            self._block_start, self._block_spent = now, self.spent

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
            self._count_step()
            return True
        ok = _timed(monitor.Monitor.gradients_ok)(self, sums, step, epoch, scaled)
        self._count_step()
        return ok

    def end_epoch(self, *, epoch: int):
        return _timed(monitor.Monitor.end_epoch)(self, epoch=epoch)


def epoch(t, loader, first_on: bool) -> tuple[float, float]:
    """One epoch in alternating blocks; (its seconds, of which in the monitor's work once per
    epoch: its start and its end, both always on)."""
    m = t.monitor
    distributed.barrier()
    start = time.perf_counter()
    m.on, before = True, m.spent
    m.start_epoch()
    per_epoch = m.spent - before
    m.begin(first_on)
    t.train_epoch(loader)  # the same batches, in the same order, every epoch
    m.on, before = True, m.spent
    m.end_epoch(epoch=t.epoch + 1)
    per_epoch += m.spent - before
    return time.perf_counter() - start, per_epoch


def compare(rank: int, world_size: int, config: qg.Config, epochs: int) -> tuple[list, list]:
    if world_size > 1 and len(os.sched_getaffinity(0)) >= world_size:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})  # a core each
    real = parts.Monitor
    parts.Monitor = Switchable  # the trainer builds its monitor (and DDP its hook) with it
    try:
        t = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    finally:
        parts.Monitor = real
    loader, _, _ = t.prepare_dataloaders()
    t.on_epoch_start(loader)
    epoch(t, loader, True)  # warm-up
    t.monitor.blocks.clear()
    t.monitor._epoch = -1
    epochs_timed = [epoch(t, loader, e % 2 == 0) for e in range(epochs)]
    t.close()
    return t.monitor.blocks, epochs_timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=80)
    args = smoke.parse(parser, graphs=400, epochs=4)
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
            rows.append(qg.spawn(compare, world_size, run, args.epochs, backend="gloo")[0])
    print(
        f"{args.graphs} graphs (70 % of them trained on), the shipped model, {args.epochs} "
        f"epochs in blocks of {BLOCK} steps with and without the monitor, alternating; rank 0's "
        "times\n"
    )
    print(
        "| processes | ms per block of steps, no monitor | ratio of medians, with / without | "
        "once per epoch | the cost | noise: no monitor / no monitor | inside the monitor |"
    )
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for world_size, (blocks, epochs) in zip((1, 2), rows, strict=True):
        places: dict[int, list[float]] = {}
        for _, place, _, seconds, _ in blocks:
            places.setdefault(place, []).append(seconds)
        typical = {place: statistics.median(times) for place, times in places.items()}

        def median(on: bool, blocks=blocks, typical=typical) -> float:
            return statistics.median(s / typical[p] for _, p, o, s, _ in blocks if o == on)

        ratio = median(True) / median(False)
        # The noise: the same ratio between two halves of the blocks without the monitor (the
        # epochs 0, 1 of every 4 against the epochs 2, 3: each half holds every place).
        noise = statistics.median(
            s / typical[p] for e, p, o, s, _ in blocks if not o and e % 4 < 2
        ) / statistics.median(s / typical[p] for e, p, o, s, _ in blocks if not o and e % 4 >= 2)

        inside_steps = sum(x for _, _, on, _, x in blocks if on) / sum(
            s for _, _, on, s, _ in blocks if on
        )
        per_epoch = statistics.median(x / e for e, x in epochs)
        cost, inside = ratio - 1 + per_epoch, inside_steps + per_epoch
        verdicts.append((cost <= TARGET, inside <= TARGET))
        off = statistics.median(s for _, _, on, s, _ in blocks if not on)
        print(
            f"| {world_size} | {off * 1e3:.1f} | {ratio:.3f} | {per_epoch:.2%} | "
            f"**{cost:+.2%}** | {noise - 1:+.2%} | {inside:.2%} |"
        )
    for name, i in (("the cost (ratio of medians - 1, plus the per-epoch work)", 0),
                    ("inside the monitor, as a share of the time", 1)):  # fmt: skip
        ok = all(v[i] for v in verdicts)
        print(f"\n{name}: target <= {TARGET:.0%}: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
