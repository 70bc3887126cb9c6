"""The clocks and the arithmetic of a rank's epoch: its parts, its peak memory, stragglers.

:class:`~.monitor.Monitor` marks the parts of each step with a clock from here; rank 0 names
the ranks whose own work took much longer than the others' with :func:`stragglers`.
"""

from __future__ import annotations

import contextlib
import math
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

# The parts of a rank's epoch, in the order the columns of ranks.csv list them.
PARTS = ("data", "forward", "backward", "exchange_exposed", "optimizer", "eval", "wait")
COLUMNS = (
    "epoch",
    "rank",
    "epoch_s",
    "data_s",
    "forward_s",
    "backward_s",
    "exchange_s",
    "exchange_exposed_s",
    "optimizer_s",
    "eval_s",
    "wait_s",
    "graphs_per_s",
    "peak_memory_mb",
    "bytes_exchanged",
)
# What a straggler's extra time went to, in words.
SPENT_ON = {
    "data": "waiting for data",
    "forward": "in the forward pass",
    "backward": "in the backward pass",
    "optimizer": "in the optimizer step",
}
TRAINING_PARTS = ("data", "forward", "backward", "exchange_exposed", "optimizer")


class CpuClock:
    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, marks: list) -> list[float]:
        return marks


class CudaClock:
    """Marks on the current CUDA stream, read once per epoch (after one synchronisation)."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, marks: list) -> list[float]:
        if not marks:
            return []
        torch.cuda.synchronize(self.device)
        first = marks[0]
        return [first.elapsed_time(m) / 1000.0 for m in marks]


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):  # Linux: "5" resets the peak resident set (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the process's peak


def union_length(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def stragglers(rows: list[dict[str, Any]], ratio: float) -> list[str]:
    """A line for each rank whose own work took more than ``ratio`` times the median rank's,
    saying what its extra time went to.

    A rank's own work is its training pass without the time it waited for the others (the
    exposed exchange): in a synchronous job every rank's epoch lasts as long as the slowest's,
    and the faster ones spend the difference waiting. Evaluation is left out: under
    ``validation.mode: rank0`` rank 0 evaluates alone by design.
    """
    if len(rows) < 2:
        return []

    def work(row: dict[str, Any]) -> float:
        return sum(row[f"{p}_s"] for p in SPENT_ON)

    typical = statistics.median(work(r) for r in rows)
    lines = []
    for row in rows:
        if typical <= 0 or work(row) <= ratio * typical:
            continue
        extra = {p: row[f"{p}_s"] - statistics.median(r[f"{p}_s"] for r in rows) for p in SPENT_ON}
        part = max(extra, key=extra.get)
        share = extra[part] / (work(row) - typical)
        lines.append(
            f"rank {row['rank']}: {work(row) / typical:.1f}x the median rank's work this epoch "
            f"({work(row):.2f} s against {typical:.2f} s), {min(share, 1.0):.0%} of the extra "
            f"{SPENT_ON[part]}"
        )
    return lines
