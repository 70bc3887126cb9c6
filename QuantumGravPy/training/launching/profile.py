"""``qg profile``: a few training steps under ``torch.profiler`` on every rank.

Each rank builds its trainer as ``qg train`` would, runs some warm-up steps, then ``steps``
steps, the last :data:`RECORDED_STEPS` of them under the profiler, and writes
``rank<r>.trace.json.gz`` (the Chrome trace format, compressed, which Perfetto, TensorBoard
and chrome://tracing open). Every operator of a step is an event: on causal sets of 2,048
elements six recorded steps made a trace of 641 MB, three make a few tens of MB before
compression. The monitor times all ``steps``, so the summary says where each rank's time went
(compute, the gradient exchange exposed and hidden behind the backward pass, data loading,
waiting) next to the profiler's busiest operators of the recorded steps. ``summary.csv`` holds
one row per rank. Nothing else of a run is written; each phase is logged as it starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ...config import Config
from ...errors import ConfigError, RunDirectoryError, option
from ...parallel import distributed, run_distributed
from ...runs.layout import results, write_rows
from ..loop.trainer import Trainer
from .fit import opened
from .launch import build_cache

SUMMARY = "summary.csv"
TRACE = "rank{rank}.trace.json.gz"
WARMUP_STEPS = 3  # not profiled: the first steps build buckets, caches and allocator pools
RECORDED_STEPS = 3  # the last steps of the timed ones, recorded in the trace
TOP_OPERATORS = 5


class _Steps:
    """``steps`` optimizer steps of batches from ``loader``, across epochs as needed: what
    :meth:`Trainer.train_epoch` takes for a loader."""

    def __init__(
        self,
        loader: Any,
        steps: int,
        batches_per_step: int,
        trainer: Trainer,
        at_step: Any = None,
    ):
        self.loader, self.trainer = loader, trainer
        self.batches, self.per_step = steps * batches_per_step, batches_per_step
        self.at_step = at_step  # called with each step's number before its first batch

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[Any]:
        given = 0
        while given < self.batches:
            self.trainer.on_epoch_start(self.loader)  # new draws each pass, as training does
            for batch in self.loader:
                if self.at_step is not None and given % self.per_step == 0:
                    self.at_step(given // self.per_step)
                yield batch
                given += 1
                if given == self.batches:
                    return
            self.trainer.state.epoch += 1


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's library announces every start and stop on stderr; not worth a line."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_worker(
    rank: int, world_size: int, config: Config, steps: int, output: str
) -> list[dict[str, Any]]:
    """Profile ``steps`` training steps on this rank; returns every rank's summary row."""
    # the gradient exchange gets its own label in the trace (profiling)
    with opened(config, profiling=True) as (trainer, (train_loader, _, _)):
        trainer.check_model(train_loader.dataset)
        k = trainer.training_pass.batches_per_step
        log = trainer.logger
        log.info("profile: %d warm-up steps (not timed)", WARMUP_STEPS)
        trainer.train_epoch(_Steps(train_loader, WARMUP_STEPS, k, trainer))
        activities = [torch.profiler.ProfilerActivity.CPU]
        if trainer.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        monitor = trainer.monitor
        prof = torch.profiler.profile(activities=activities)
        recorded = min(steps, RECORDED_STEPS)

        def at_step(step: int) -> None:
            if step == steps - recorded:
                with _quiet_stderr():
                    prof.start()

        log.info("profile: %d steps timed, the last %d recorded", steps, recorded)
        monitor.start_epoch()
        trainer.train_epoch(_Steps(train_loader, steps, k, trainer, at_step))
        with _quiet_stderr():
            prof.stop()
        _, row = monitor.end_epoch(epoch=1)
        trace = Path(output) / TRACE.format(rank=rank)
        log.info("profile: writing %s", trace)
        prof.export_chrome_trace(str(trace))
        log.info("profile: wrote %s (%.1f MB)", trace, trace.stat().st_size / 1e6)
        busiest = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        top = "; ".join(
            f"{e.key} {e.self_cpu_time_total / 1000:.1f} ms" for e in busiest[:TOP_OPERATORS]
        )
        mine = _summary(row, steps, top)
        return distributed.all_gather_object(mine) if world_size > 1 else [mine]


def _summary(row: dict[str, Any], steps: int, top: str) -> dict[str, Any]:
    total = row["epoch_s"]
    compute = row["forward_s"] + row["backward_s"] + row["optimizer_s"]
    hidden = max(0.0, row["exchange_s"] - row["exchange_exposed_s"])
    idle = row["wait_s"] + row["eval_s"]

    def share(seconds: float) -> float:
        return seconds / total if total > 0 else 0.0

    return {
        "rank": row["rank"],
        "steps": steps,
        "seconds": total,
        "compute_share": share(compute),
        "exchange_exposed_share": share(row["exchange_exposed_s"]),
        "exchange_hidden_share": share(hidden),
        "data_share": share(row["data_s"]),
        "idle_share": share(idle),
        "graphs_per_s": row["graphs_per_s"],
        "bytes_exchanged": row["bytes_exchanged"],
        "top_operators": top,
    }


def profile(
    config: Config, *, steps: int = 20, world_size: int | None = None, output: str | None = None
) -> tuple[Path, list[dict[str, Any]]]:
    """Profile ``steps`` training steps of ``config`` on ``world_size`` processes (default
    ``parallel.world_size``); returns the output directory (default ``RUN_DIR/profile``) and
    one summary row per rank, also written to its ``summary.csv``.

    Refused: a default output in a run directory that holds a run, and an output folder that
    is not empty (nothing is overwritten).
    """
    if steps < 1:
        raise ConfigError(f"--steps: expected a positive number of steps, found {steps}")
    world_size = world_size or config.parallel.world_size
    if world_size < 1:
        raise ConfigError(f"--world-size: expected a positive number, found {world_size}")
    if not config.monitor.timing:
        raise ConfigError("monitor.timing: the profile's summary needs it; leave it true")
    if output is None:
        found = results(config.run_dir)
        if found:
            raise RunDirectoryError(
                f"{config.run_dir} holds a run ({', '.join(found[:3])}); profile into another "
                f"training.path or name a folder with {option('output')}"
            )
        target = config.run_dir / "profile"
    else:
        target = Path(output)
    if target.is_file() or (target.is_dir() and any(target.iterdir())):
        raise RunDirectoryError(
            f"{target} exists and is not an empty folder; choose another "
            f"{option('output')} or remove it"
        )
    target.mkdir(parents=True, exist_ok=True)
    build_cache(config, world_size)
    if world_size == 1 and distributed.process_env() is None:
        rows = profile_worker(0, 1, config, steps, str(target))
    else:
        rows = run_distributed(
            profile_worker, config, config, steps, str(target), world_size=world_size
        )
    write_rows(target / SUMMARY, rows)
    return target, rows


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The summary as text: a line per rank, then each rank's busiest operators."""
    lines = [
        f"{'rank':>4}  {'steps':>5}  {'seconds':>7}  {'compute':>7}  {'exchange':>8}  "
        f"{'hidden':>6}  {'data':>5}  {'idle':>5}  {'graphs/s':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r['rank']:>4}  {r['steps']:>5}  {r['seconds']:>7.3f}  {r['compute_share']:>7.0%}  "
            f"{r['exchange_exposed_share']:>8.0%}  {r['exchange_hidden_share']:>6.0%}  "
            f"{r['data_share']:>5.0%}  {r['idle_share']:>5.0%}  {r['graphs_per_s']:>8.0f}"
        )
    lines.append("(exchange: the gradient exchange the backward pass waited for; hidden: the part")
    lines.append(" that ran behind it; idle: waiting for the other ranks)")
    for r in rows:
        lines.append(f"rank {r['rank']} busiest operators: {r['top_operators']}")
    return "\n".join(lines)
