"""Training throughput on a GPU: graphs/s of qg.Trainer against the fastest hand-written PyG
loop, the common PyG loop and PyTorch Lightning, at 32-64 and at 1,024-2,048 elements; and what
keeps a GPU waiting (host reads, recompilations, idle time).

A cell is a size x where the data is x precision x compile. Data on the device: qg.Trainer with
`data.device: cuda` (the dataset held on the GPU, each batch gathered there), the other loops a
list of batches moved to the GPU once. Data on the host: `data.device: cpu` (batches assembled
on the host, copied each step); the hand-written loop copies each batch of a pinned list with
`non_blocking`, Lightning with its own transfer. bf16: `torch.autocast` around forward and loss
(`training.precision: bf16`, Lightning's `bf16-mixed`). Compile: `model.compile(dynamic=True)`
for the hand-written loop, `training.compile: true` for qg (compiled as the package does it);
Lightning and the common PyG loop run eager only.

Every loop of a cell trains a deep copy of the cell's qg.Trainer model, made before any step,
with the config's optimizer (AdamW, fused) and cross-entropy on `batch.y`:
- `qg.Trainer`: `train_epoch` over its own training loader; "padded": with batches of a fixed
  budget of nodes, padded to fixed shapes (`--padded`, by default `training.batch_nodes` =
  batch size x mean elements and `training.pad_batches: true`), in the cells of fp32 data on
  the device;
- hand-written, fastest: the same batches in a list, no host reads (the loss is summed on the
  device), `zero_grad(set_to_none=True)`;
- hand-written with qg's work (fp32 eager cells with data on the device): that loop, its
  batches made each step by the trainer's own loader, the loss, the right answers and the
  global gradient norm summed on the device, as qg's step does;
- common PyG loop: `torch_geometric.loader.DataLoader(list of Data, shuffle=True)`,
  `batch.to(device)` and `loss.item()` each step: host data by nature, once per size and
  precision;
- Lightning: `lightning_helpers` (a `bench` extra; skipped when not installed), its epoch timed
  from its own epoch-start to epoch-end callbacks.

Warm-up epochs are untimed (compiling happens there; its seconds are reported apart), then
`--repeats` epochs alternate between the loops of a cell, so that a shared machine's noise falls
on each alike; the clock is read after `torch.cuda.synchronize()`; graphs/s = training graphs
per epoch / median seconds. Besides: host reads per steady training step (`HostReads`, over
epochs of n and 2n batches of the real loader: the difference per extra step; counted in the
fp32 eager cells after their timed epochs), frames
compiled by dynamo (`torch._dynamo.utils.counters["frames"]["ok"]`, in warm-up and in the timed
epochs: torch 2.x keeps no recompilation counter of its own, and every compile after warm-up is
one), the GPU busy fraction of a steady qg epoch and of the fastest hand-written loop's at
1,024-2,048 elements, and their kernels per step (the union of the kernels' intervals from
`torch.profiler`, CUDA activity only, over the epoch's wall time),
preparation ms per causal set at 2,048 and 8,192 elements (one process, a fresh cache) and the
peak GPU memory of a training step on one such set, and both kinds of batches with 2 GPUs when
there are 2.

The run stops starting work at `--time-limit` seconds: the jobs run by importance (eager fp32
cells with data on the device, of every loop at both sizes; then host data; then bf16; then the
busy fraction; then compile with fp32 data on the device; then preparation, memory and 2 GPUs;
then the other compile cells, which seldom fit), and a job whose estimate (from what ran before
it) does not fit in the time left is skipped and listed. Every finished row is written to
`--out` (JSON lines) at once, so a run killed at its limit keeps what it measured.

    python bench/gpu.py [--quick] [--device cuda|cpu] [--repeats 5] [--time-limit SECONDS]
                        [--only GROUP ...] [--out runs/bench_gpu.jsonl]

On a GPU: 2,000 sets of 32-64 elements and 256 of 1,024-2,048, 240 s. On a CPU (`make bench`'s
table): 600 and 24, 600 s, where there is no launch overhead to remove and the verdicts say
nothing about a GPU.

`--quick` (tiny sizes, one repeat, compile off, bf16 at the small size only, no profiler)
finishes on a CPU in well under a minute: the test suite runs it as a smoke test of this script,
not for its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lightning_helpers  # noqa: E402
import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.training.monitoring.host_reads import HostReads  # noqa: E402

HAND_TARGET = 0.95  # qg.Trainer's graphs/s against the fastest hand-written loop's, at least
PYG_TARGET = 2.0  # against the common PyG loop at 32-64 elements, at least
COMPILE_TARGET = 1.3  # compiled (and padded) against eager at 32-64 elements, at least
BUSY_TARGET = 0.90  # GPU busy fraction of a steady epoch at 1,024-2,048 elements, at least
# What a compile of the default model's forward and backward is assumed to cost until this run
# has timed a compile cell: a guess, used only to decide whether the first one fits in the time
# left, never reported.
COMPILE_PRIOR_S = 40.0
# Preparation grows with the square of the elements (the causal matrix): how the cost of the
# 8,192-element sets is guessed from that of the 2,048-element ones.
PREP_GROWTH = (8192 / 2048) ** 2

LOOPS = {
    "qg": "`qg.Trainer`",
    "qg-padded": "`qg.Trainer`, padded",
    "hand": "hand-written, fastest",
    "hand-work": "hand-written, qg's work",
    "pyg": "common PyG loop",
    "lightning": "Lightning",
}
DATA = {"device": "on the device", "host": "on the host"}
BUSY_LOOPS = ("qg", "hand")  # whose GPU busy fraction is measured
# The groups of jobs, in the order they run (--only picks some): fp32 eager cells with data on
# the device, with data on the host, bf16 eager cells, the busy fraction, fp32 compiled cells
# with data on the device, preparation and memory, 2 GPUs, the other compiled cells.
GROUPS = ("eager", "host", "bf16", "busy", "compiled", "prep", "gpus", "other-compiled")


@dataclass(frozen=True)
class Size:
    name: str
    graphs: int
    points: tuple[int, int]
    batch: int

    @property
    def label(self) -> str:
        return f"{self.points[0]:,}-{self.points[1]:,} elements"

    @property
    def budget(self) -> int:
        """Nodes per padded batch: what a batch of ``batch`` graphs of mean size holds, so
        that an epoch takes about as many steps as with the default batches."""
        return self.batch * sum(self.points) // 2


SIZES = {
    "gpu": (Size("small", 2000, (32, 64), 32), Size("large", 256, (1024, 2048), 8)),
    # a CPU's table (make bench): cells that fit its time, several steps an epoch each
    "cpu": (Size("small", 600, (32, 64), 32), Size("large", 24, (1024, 2048), 4)),
    # batches of 2 large sets: an epoch of several steps, and each step short on a CPU
    "quick": (Size("small", 96, (32, 64), 32), Size("large", 8, (1024, 2048), 2)),
}


@dataclass(frozen=True)
class Cell:
    size: Size
    data: str  # device or host
    precision: str  # 32 or bf16
    compiled: bool

    @property
    def name(self) -> str:
        compiled = "compiled" if self.compiled else "eager"
        precision = precision_name(self.precision)
        return f"{self.size.name} ({self.size.label}), data {self.data}, {precision}, {compiled}"


@dataclass
class Loop:
    """One contender of a cell: ``epoch()`` trains one epoch and returns its seconds."""

    name: str
    epoch: Callable[[], float]
    graphs: int  # training graphs per epoch
    batches: int
    compiled: bool = False
    warmup: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    frames: dict[str, int] = field(default_factory=lambda: {"warmup": 0, "timed": 0})
    error: str | None = None
    # the first n steps of an epoch, and the optimizer whose step counters are not host reads
    steps: Callable[[int], Any] | None = None
    optimizer: torch.optim.Optimizer | None = None

    def run(self, phase: str, device: torch.device) -> None:
        if self.error is not None:
            return
        before = frames_compiled() if self.compiled else 0
        try:
            seconds = self.epoch()
        except Exception as e:  # one loop's failure must not lose the cell's other rows
            self.error = describe(e)
            release(device)
            return
        (self.warmup if phase == "warmup" else self.seconds).append(seconds)
        if self.compiled:
            self.frames[phase] += frames_compiled() - before


def precision_name(precision: str) -> str:
    return "fp32" if precision == "32" else precision


def describe(e: BaseException) -> str:
    traceback.print_exception(e, file=sys.stderr)
    return f"{type(e).__name__}: {e}"[:400]


def frames_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["frames"]["ok"]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def timed(device: torch.device, fn: Callable[[], Any]) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class Batches:
    """A list of batches as one iterable (Lightning reads a plain list as a list of loaders)."""

    def __init__(self, items: list):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class First:
    """The first ``n`` batches of one pass of ``loader``, as an epoch of ``train_epoch``."""

    def __init__(self, loader, n: int):
        self.loader, self.n = loader, n

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.n)

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name: str) -> Any:  # what the trainer reads of its loader's plan
        return getattr(self.loader, name)


def hand_written(model, optimizer, device, precision: str, on_host: bool):
    """The fastest loop one would write by hand: nothing read on the host, the loss summed on
    the device; host batches (pinned) are copied without waiting."""

    def train(batches) -> torch.Tensor:
        model.train()
        total = torch.zeros((), device=device)
        for batch in batches:
            if on_host:
                batch = batch.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        return total

    return train


def hand_same_work(model, optimizer, device, precision: str, loader):
    """The hand-written loop doing the work of qg's step: its batches made each step by the
    trainer's own loader (shuffled; gathered on the GPU with data on the device, else copied in
    one pinned buffer a step ahead), the loss and the right answers summed on the device in
    float64, and the global gradient norm taken (summed for its mean), with nothing read on
    the host. What it leaves out of qg's step: the non-finite check's bookkeeping, the masked
    update, progress, timing marks and the checks of the model's outputs."""
    params = list(model.parameters())
    float_dtype = torch.float32

    def train(n: int | None = None) -> torch.Tensor:
        model.train()
        sums = torch.zeros(4, dtype=torch.float64, device=device)
        for batch in itertools.islice(qg.data.fed(loader, device, float_dtype), n):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, precision):
                out = model(batch)
                loss = torch.nn.functional.cross_entropy(out, batch.y)
            loss.backward()
            norm = torch.linalg.vector_norm(
                torch.stack(torch._foreach_norm([p.grad for p in params]))
            )
            optimizer.step()
            graphs = batch.num_graphs
            sums[0].add_(loss.detach(), alpha=graphs)
            sums[1].add_((out.detach().argmax(dim=-1) == batch.y).sum())
            sums[2].add_(graphs)
            sums[3].add_(norm)
        return sums

    return train


def common_pyg(model, optimizer, device, precision: str):
    """The loop of PyTorch Geometric's examples: its DataLoader, a copy and a read each step."""

    def train(loader) -> float:
        model.train()
        total = count = 0
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            with autocast(device, precision):
                loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.item() * batch.num_graphs
            count += batch.num_graphs
        return total / count

    return train


def gpu_busy(prof, seconds: float) -> tuple[float, int]:
    """The fraction of ``seconds`` in which some kernel of ``prof`` ran (copies and memsets
    left out), and the number of kernels."""
    from torch.autograd import DeviceType

    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA
        and not getattr(e, "is_user_annotation", False)
        and not e.name.startswith(("Memcpy", "Memset"))
    )
    busy, end = 0.0, float("-inf")
    for lo, hi in spans:  # the union of the intervals, in microseconds
        if hi > end:
            busy += hi - max(lo, end)
            end = hi
    return busy / 1e6 / seconds, len(spans)


class Bench:
    """One run: its jobs, the rows they wrote (also to ``--out``, each as it comes), what was
    skipped, and the time left under ``--time-limit``."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        profile = "quick" if args.quick else ("gpu" if self.device.type == "cuda" else "cpu")
        self.sizes = SIZES[profile]
        self.start = time.perf_counter()
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.datasets: dict[str, Any] = {}
        self.kept: dict[str, dict[str, Loop]] = {}  # the large eager fp32 loops, for busy
        self.cell_seconds: dict[tuple[str, bool], tuple[float, int]] = {}
        self.prep_ms: dict[int, float] = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="bench_gpu_")
        self.runs = itertools.count()
        self.out = None
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            self.out = open(args.out, "w")
        self.lightning = lightning_helpers.available()
        if not self.lightning:
            self.notes.append("Lightning: not installed (`pip install -e '.[bench]'`)")

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
        self.tmp.cleanup()

    def left(self) -> float:
        return self.args.time_limit - (time.perf_counter() - self.start)

    def write(self, kind: str, **row: Any) -> dict[str, Any]:
        row = {"kind": kind, **row}
        self.rows.append(row)
        if self.out is not None:
            self.out.write(json.dumps(row, default=str) + "\n")
            self.out.flush()
        return row

    def config(self, size: Size, data: str = "device", precision: str = "32", *extra: str):
        lo, hi = size.points
        return qg.load_config(
            ROOT / "configs" / "train.yaml",
            [
                f"data.root={self.args.data_root}",
                f"data.num_graphs={size.graphs}",
                f"data.num_points=[{lo},{hi}]",
                "data.storage=memory",  # auto would build 4 graphs first to weigh them
                f"data.device={'cuda' if data == 'device' else 'cpu'}",
                f"training.device={self.device}",
                f"training.batch_size={size.batch}",
                f"training.precision={precision}",
                f"training.path={self.tmp.name}/run{next(self.runs)}",
                "training.plots=false",
                "early_stopping.enabled=false",
                "log_level=WARNING",
                *extra,
            ],
        )

    def padded(self, size: Size) -> list[str]:
        return [o.format(nodes=size.budget) for o in self.args.padded]

    # --- jobs -------------------------------------------------------------------------------

    def skip(self, what: str, why: str) -> None:
        self.skipped.append((what, why))
        self.write("skipped", what=what, why=why)
        print(f"skipped: {what} ({why})", file=sys.stderr, flush=True)

    def job(self, what: str, estimate: float | None, fn: Callable[[], Any]) -> None:
        """Run ``fn`` if its estimate fits in the time left (unknown: if any is left)."""
        left = self.left()
        if left <= 0 or (estimate is not None and estimate > left):
            why = f"estimated {estimate:.0f} s, {max(left, 0):.0f} s left" if estimate else ""
            self.skip(what, why or "no time left")
            return
        print(f"{what} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            fn()
        except Exception as e:  # a rare GPU run must not be lost to one failure
            self.write("error", what=what, error=describe(e))
            release(self.device)
        print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)

    def prepare(self, size: Size) -> None:
        start = time.perf_counter()
        config = self.config(size)
        # more processes than one only pay for themselves on more than a few sets
        workers = 1 if self.args.quick else min(12, os.cpu_count() or 1)
        self.datasets[size.name] = qg.data.dataset_from_config(
            config.data, world_size=workers, progress=False
        )
        self.write(
            "data",
            size=size.name,
            graphs=size.graphs,
            elements=list(size.points),
            seconds=time.perf_counter() - start,
            processes=workers,
        )

    def cell_estimate(self, cell: Cell, names: list[str]) -> float | None:
        """Seconds: what the first cell of its size and compile took per loop, times its loops;
        for the first compile cell, the eager one's and a compile for each set of options
        (padded batches are compiled for their one shape, the others for dynamic shapes)."""
        seen = self.cell_seconds.get((cell.size.name, cell.compiled))
        if seen is not None:
            return seen[0] / seen[1] * len(names)
        eager = self.cell_seconds.get((cell.size.name, False))
        if cell.compiled and eager is not None:
            compiles = 2 if "qg-padded" in names else 1
            return eager[0] / eager[1] * len(names) + COMPILE_PRIOR_S * compiles
        return None

    def plan(self, cell: Cell) -> list[str]:
        eager = not cell.compiled
        names = ["qg", "hand"]
        if cell.data == "device" and cell.precision == "32":
            names.insert(1, "qg-padded")
            if eager:
                names.append("hand-work")
        if eager and self.lightning:
            names.append("lightning")
        if eager and cell.data == "host":
            names.append("pyg")
        return names

    def add_cell(self, cell: Cell) -> None:
        names = self.plan(cell)
        self.job(cell.name, self.cell_estimate(cell, names), lambda: self.run_cell(cell))

    def run_cell(self, cell: Cell) -> None:
        start = time.perf_counter()
        loops: list[Loop] = []
        common = {
            "size": cell.size.name,
            "elements": list(cell.size.points),
            "data": cell.data,
            "precision": cell.precision,
            "compile": cell.compiled,
        }
        try:
            loops = self.build(cell, self.plan(cell))
        except Exception as e:
            error = describe(e)
            for name in self.plan(cell):
                self.write("cell", loop=name, **common, error=error)
            release(self.device)
            return
        for _ in range(self.args.warmup):
            for loop in loops:
                loop.run("warmup", self.device)
        for _ in range(self.args.repeats):
            for loop in loops:
                loop.run("timed", self.device)
        for loop in loops:
            median = statistics.median(loop.seconds) if loop.seconds else None
            row = {
                "loop": loop.name,
                **common,
                "graphs": loop.graphs,
                "batches": loop.batches,
                "seconds": loop.seconds,
                "warmup_s": loop.warmup,
                "median_s": median,
                "graphs_per_s": loop.graphs / median if median else None,
                "error": loop.error,
            }
            if loop.name == "qg-padded":
                row["padded"] = self.padded(cell.size)
            if loop.compiled:
                compile_s = loop.warmup[0] - median if loop.warmup and median else None
                row.update(
                    compile_s=compile_s,
                    frames_warmup=loop.frames["warmup"],
                    frames_timed=loop.frames["timed"],
                    timed_batches=loop.batches * len(loop.seconds),
                )
            self.write("cell", **row)
        # --quick counts at the small size only: the same code, and large steps are slow on a CPU
        if not cell.compiled and cell.precision == "32":
            if not (self.args.quick and cell.size is self.sizes[1]):
                self.count_reads(cell, loops)
        key = (cell.size.name, cell.compiled)
        if key not in self.cell_seconds:
            self.cell_seconds[key] = (time.perf_counter() - start, len(loops))
        loops.clear()
        release(self.device)

    def build(self, cell: Cell, names: list[str]) -> list[Loop]:
        size, device, precision = cell.size, self.device, cell.precision
        dataset = self.datasets[size.name]
        extra = ["training.compile=true"] if cell.compiled else []
        config = self.config(size, cell.data, precision, *extra)
        trainer = qg.Trainer(config, dataset)
        # copied before any step (and before compiling: a deep copy drops it), so that every
        # loop starts from the same weights
        model0 = copy.deepcopy(trainer.model)
        train_loader, _, _ = trainer.prepare_dataloaders()
        batches = list(train_loader)  # on the GPU when data.device is cuda there
        on_host = batches[0].x.device.type != device.type
        if on_host and device.type == "cuda":
            batches = [b.pin_memory() for b in batches]
        graphs = sum(b.num_graphs for b in batches)
        opt = config.training.optimizer
        optimizer_cls = qg.config.resolve(opt.type, key="")

        def qg_loop(name: str, trainer: qg.Trainer, loader) -> Loop:
            return Loop(
                name,
                lambda: timed(device, lambda: trainer.train_epoch(loader)),
                graphs=sum(b.num_graphs for b in loader) if name == "qg-padded" else graphs,
                batches=len(loader),
                compiled=cell.compiled,
                steps=lambda n: trainer.train_epoch(First(loader, n)),
                optimizer=trainer.optimizer,
            )

        loops = []
        for name in names:
            if name == "qg":
                loops.append(qg_loop(name, trainer, train_loader))
            elif name == "qg-padded":
                padded_config = self.config(size, cell.data, precision, *extra, *self.padded(size))
                padded = qg.Trainer(padded_config, dataset)
                loader, _, _ = padded.prepare_dataloaders()
                loops.append(qg_loop(name, padded, loader))
            elif name == "hand":
                model = copy.deepcopy(model0)
                optimizer = optimizer_cls(model.parameters(), **opt.kwargs)
                if cell.compiled:
                    model.compile(dynamic=True)
                train = hand_written(model, optimizer, device, precision, on_host)
                loops.append(
                    Loop(
                        name,
                        lambda t=train: timed(device, lambda: t(batches)),
                        graphs,
                        len(batches),
                        compiled=cell.compiled,
                        steps=lambda n, t=train: t(batches[:n]),
                        optimizer=optimizer,
                    )
                )
            elif name == "hand-work":
                model = copy.deepcopy(model0)
                optimizer = optimizer_cls(model.parameters(), **opt.kwargs)
                work = hand_same_work(model, optimizer, device, precision, train_loader)
                loops.append(
                    Loop(
                        name,
                        lambda t=work: timed(device, t),
                        graphs,
                        len(train_loader),
                        steps=lambda n, t=work: t(n),
                        optimizer=optimizer,
                    )
                )
            elif name == "lightning":
                module = lightning_helpers.module(copy.deepcopy(model0), optimizer_cls, opt.kwargs)
                loops.append(self.lightning_loop(module, batches, precision, graphs))
            elif name == "pyg":
                from torch_geometric.loader import DataLoader

                train_set, _, _ = qg.data.split_dataset(
                    dataset, config.data.split, config.data.seed
                )
                data = [train_set[i] for i in range(len(train_set))]
                loader = DataLoader(data, batch_size=size.batch, shuffle=True)
                model = copy.deepcopy(model0)
                optimizer = optimizer_cls(model.parameters(), **opt.kwargs)
                train = common_pyg(model, optimizer, device, precision)
                loops.append(
                    Loop(
                        name,
                        lambda t=train, b=loader: timed(device, lambda: t(b)),
                        len(data),
                        len(loader),
                        steps=lambda n, t=train, b=loader: t(First(b, n)),
                        optimizer=optimizer,
                    )
                )
        busy = size is self.sizes[1] and cell.data == "device" and precision == "32"
        if busy and not cell.compiled:
            self.kept[size.name] = {loop.name: loop for loop in loops if loop.name in BUSY_LOOPS}
        return loops

    def lightning_loop(self, module, batches: list, precision: str, graphs: int) -> Loop:
        seconds: list[float] = []
        cuda = self.device.type == "cuda"
        options = {
            "accelerator": "gpu" if cuda else "cpu",
            "devices": [self.device.index or 0] if cuda else 1,
            "precision": "bf16-mixed" if precision == "bf16" else "32-true",
        }

        def epoch() -> float:
            trainer = lightning_helpers.trainer(1, seconds, **options)
            trainer.fit(module, train_dataloaders=Batches(batches))
            return seconds[-1]

        return Loop("lightning", epoch, graphs, len(batches))

    def count_reads(self, cell: Cell, loops: list[Loop]) -> None:
        """Host reads per steady step: epochs of the first n and 2n batches of one pass, so
        that what an epoch reads once (at its start, its sums at its end) cancels out."""
        for loop in loops:
            if loop.steps is None or loop.error is not None:
                continue
            n = min(8, loop.batches) // 2
            if n == 0:
                self.write(
                    "host_reads",
                    loop=loop.name,
                    size=cell.size.name,
                    data=cell.data,
                    error="an epoch of one batch: counting needs two",
                )
                continue
            counts, where = [], []
            try:
                for steps in (n, 2 * n):
                    with HostReads(loop.optimizer) as reads:
                        loop.steps(steps)
                    synchronize(self.device)
                    counts.append(reads.count)
                    where.append(reads.where)
            except Exception as e:
                self.write(
                    "host_reads",
                    loop=loop.name,
                    size=cell.size.name,
                    data=cell.data,
                    error=describe(e),
                )
                continue
            self.write(
                "host_reads",
                loop=loop.name,
                size=cell.size.name,
                data=cell.data,
                precision=cell.precision,
                steps=[n, 2 * n],
                reads=counts,
                per_step=(counts[1] - counts[0]) / n,
                where=dict(where[1] - where[0]),
            )

    # --- the extras ---------------------------------------------------------------------------

    def busy(self, size: Size) -> None:
        """The GPU busy fraction of one steady epoch of qg and of the fastest hand-written loop
        (the eager fp32 cell's, data on the device), from the kernels the profiler saw: their
        union over the epoch's wall time, and the kernels per step (CUDA activity only: no
        host-side events, whose recording would slow the host)."""
        from torch.profiler import ProfilerActivity, profile

        for name, loop in self.kept.pop(size.name).items():
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                seconds = loop.epoch()
            fraction, kernels = gpu_busy(prof, seconds)
            self.write(
                "busy",
                loop=name,
                size=size.name,
                elements=list(size.points),
                fraction=fraction,
                kernels=kernels,
                steps=loop.batches,
                seconds=seconds,
            )

    def prep(self, elements: int, sets: int) -> None:
        """Preparation ms per causal set of ``elements`` elements: ``sets`` generated and
        cached by one process on a fresh root (on the host; no GPU takes part)."""
        size = Size(f"prep{elements}", sets, (elements, elements), 1)
        config = self.config(size, "host", "32", f"data.root={self.tmp.name}/prep{elements}")
        # one tiny set first, untimed: with the benchmark's data cached, the generating code
        # would otherwise be imported inside the timed part
        tiny = self.config(
            Size("tiny", 1, (32, 32), 1), "host", "32", f"data.root={self.tmp.name}/tiny{elements}"
        )
        qg.data.dataset_from_config(tiny.data, world_size=1, progress=False)
        start = time.perf_counter()
        dataset = qg.data.dataset_from_config(config.data, world_size=1, progress=False)
        ms = (time.perf_counter() - start) * 1e3 / sets
        self.prep_ms[elements] = ms
        self.datasets[size.name] = (config, dataset)
        self.write("prep", elements=elements, sets=sets, ms_per_set=ms)

    def memory(self, elements: int) -> None:
        """Peak GPU memory of one training step of qg.Trainer on one set of ``elements``
        elements (fp32, eager), after a first step has made the optimizer's state."""
        from torch_geometric.data import Batch

        config, dataset = self.datasets[f"prep{elements}"]
        trainer = qg.Trainer(config, dataset)
        batch = [Batch.from_data_list([dataset[0]])]
        trainer.train_epoch(batch)
        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        trainer.train_epoch(batch)
        synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        self.write(
            "memory",
            elements=elements,
            peak_mb=peak / 2**20,
            above_mb=(peak - before) / 2**20,
            held_mb=before / 2**20,
        )
        del trainer
        release(self.device)

    def two_gpus(self, size: Size) -> None:
        """qg with parallel.world_size 2 (one process per GPU, batch size per process), the
        default and the padded batches: graphs/s from the history's epoch seconds."""
        dataset = self.datasets[size.name]
        epochs = self.args.warmup + self.args.repeats
        for batches in ("default", "padded"):
            extra = ["parallel.world_size=2", f"training.num_epochs={epochs}"]
            if batches == "padded":
                extra += self.padded(size)
            config = self.config(size, "device", "32", *extra)
            train, _, _ = qg.data.split_dataset(dataset, config.data.split, config.data.seed)
            try:
                result = qg.launch(config, world_size=2)
            except Exception as e:
                self.write("ddp", size=size.name, batches=batches, error=describe(e))
                continue
            seconds = [row["epoch_seconds"] for row in result["history"]][self.args.warmup :]
            median = statistics.median(seconds)
            self.write(
                "ddp",
                size=size.name,
                batches=batches,
                world_size=2,
                seconds=seconds,
                median_s=median,
                graphs_per_s=len(train) / median,
            )


# --- the order of the work ----------------------------------------------------------------------


def schedule(bench: Bench) -> None:
    args, cuda = bench.args, bench.device.type == "cuda"
    small, large = bench.sizes

    def want(group: str) -> bool:
        return not args.only or group in args.only

    for size in (small, large):
        what = f"data: {size.graphs} causal sets of {size.label}"
        bench.job(what, None, lambda s=size: bench.prepare(s))

    def cells(data: str, precision: str, compiled: bool, sizes: tuple = (small, large)) -> None:
        for size in sizes:
            cell = Cell(size, data, precision, compiled)
            if size.name not in bench.datasets:
                bench.skip(cell.name, "its data was not prepared")
                continue
            bench.add_cell(cell)

    if want("eager"):
        cells("device", "32", False)
    if want("host"):
        cells("host", "32", False)
    if want("bf16"):
        # --quick: the small size only (the same code at both; large bf16 steps are slow on a CPU)
        sizes = (small,) if args.quick else (small, large)
        cells("device", "bf16", False, sizes)
        cells("host", "bf16", False, sizes)
    if cuda and large.name in bench.kept and want("busy"):
        seen = bench.cell_seconds.get((large.name, False))
        estimate = 2 * seen[0] / seen[1] if seen else None
        bench.job("GPU busy fraction", estimate, lambda: bench.busy(large))
    bench.kept.clear()  # the trainers kept for it hold their datasets on the GPU
    release(bench.device)
    if not args.quick and want("compiled"):
        cells("device", "32", True)
    if want("prep"):
        preparation(bench, cuda)
    if cuda and torch.cuda.device_count() >= 2:
        for size in (small, large):
            if size.name in bench.datasets and want("gpus"):
                bench.job(f"2 GPUs, {size.label}", None, lambda s=size: bench.two_gpus(s))
    else:
        bench.notes.append(
            "2 GPUs: the 2-GPU rows need 2 GPUs (this machine has "
            f"{torch.cuda.device_count() if cuda else 0})"
        )
    if not args.quick and want("other-compiled"):
        cells("host", "32", True)
        cells("device", "bf16", True)
        cells("host", "bf16", True)


def preparation(bench: Bench, cuda: bool) -> None:
    """Preparation ms per set at 2,048 and 8,192 elements, and a step's peak GPU memory."""
    quick = bench.args.quick
    prep_sets = {2048: 2 if quick else 4, 8192: 2}
    bench.job(
        f"preparation of {prep_sets[2048]} sets of 2,048 elements",
        None,
        lambda: bench.prep(2048, prep_sets[2048]),
    )
    if quick:
        bench.notes.append("preparation and memory at 8,192 elements: not in --quick")
    else:
        known = bench.prep_ms.get(2048)
        estimate = known * PREP_GROWTH * prep_sets[8192] / 1e3 if known else None
        bench.job(
            f"preparation of {prep_sets[8192]} sets of 8,192 elements",
            estimate,
            lambda: bench.prep(8192, prep_sets[8192]),
        )
    if cuda:
        for elements in (2048, 8192):
            if f"prep{elements}" in bench.datasets:
                bench.job(
                    f"peak memory at {elements:,} elements",
                    None,
                    lambda n=elements: bench.memory(n),
                )
    else:
        bench.notes.append("peak GPU memory: N/A on a CPU")


# --- the report ---------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "—" if value is None else format(value, spec)


def verdict(value: float | None, ok: Callable[[float], bool]) -> str:
    if value is None:
        return "not measured"
    return "met" if ok(value) else "MISSED"


def report(bench: Bench, header: str) -> None:
    rows = bench.rows
    cells = [r for r in rows if r["kind"] == "cell"]
    order = list(LOOPS)

    def key(r: dict) -> tuple:
        return (r["compile"], r["precision"] != "32", r["data"] != "device", order.index(r["loop"]))

    def rate(size: str, loop: str, data="device", precision="32", compiled=False):
        want = (size, loop, data, precision, compiled)
        for r in cells:
            if (r["size"], r["loop"], r["data"], r["precision"], r["compile"]) == want:
                return r.get("graphs_per_s")
        return None

    print(f"\n{header}\n")
    for size in bench.sizes:
        mine = sorted((r for r in cells if r["size"] == size.name), key=key)
        train = next((r["graphs"] for r in mine if r["loop"] == "qg" and "graphs" in r), None)
        print(
            f"### {size.label}: {size.graphs} sets ({fmt(train, 'd')} for training), batch "
            f"{size.batch}; "
            f"epochs per loop: {bench.args.warmup} warm-up, {bench.args.repeats} timed\n"
        )
        print("| loop | data | precision | compile | graphs/s (median) | / hand-written |")
        print("|---|---|---|---|---|---|")
        for r in mine:
            hand = rate(size.name, "hand", r["data"], r["precision"], r["compile"])
            value = r.get("graphs_per_s")
            ratio = value / hand if value and hand else None
            shown = fmt(value) if not r.get("error") else f"error: {r['error'][:80]}"
            name = LOOPS[r["loop"]]
            if r["loop"] == "qg-padded" and r.get("padded"):
                name += f" ({', '.join(r['padded'])})"
            precision = precision_name(r["precision"])
            compiled = "on" if r["compile"] else "off"
            print(
                f"| {name} | {DATA[r['data']]} | {precision} | {compiled} | {shown} | "
                f"{fmt(ratio, '.2f')} |"
            )
        print()

    print("Lightning and the common PyG loop run eager only; the common PyG loop takes host data.")
    if bench.args.quick:
        print(
            "--quick: tiny sizes, 1 repeat, compile off, no profiler: a smoke test of the "
            "script, not figures to judge by."
        )
    for note in bench.notes:
        print(note)
    print()
    reads = [r for r in rows if r["kind"] == "host_reads"]
    if reads:
        print(
            "(HostReads counts every read of a tensor's value, of host tensors too: the common "
            "PyG loop's collation reads host tensors, which wait for nothing on a GPU; its "
            "loss.item() waits.)"
        )
    for r in reads:
        if r.get("error"):
            print(
                f"host reads per training step, {LOOPS[r['loop']]}, {r['size']}, data "
                f"{DATA[r['data']]}: error: {r['error']}"
            )
            continue
        where = ", ".join(f"{k} x{v}" for k, v in r["where"].items())
        print(
            f"host reads per training step, {LOOPS[r['loop']]}, {r['size']}, data "
            f"{DATA[r['data']]}: {r['per_step']:g} ({r['reads'][0]} in {r['steps'][0]} "
            f"steps, {r['reads'][1]} in {r['steps'][1]}){': ' + where if where else ''}"
        )
    for r in cells:
        if r["compile"] and r.get("graphs_per_s"):
            spent = (
                f"compile {fmt(r['compile_s'], '.1f')} s (warm-up epoch less a steady one)"
                if r["frames_warmup"]
                else "nothing compiled in warm-up (dynamo's cache had it from an earlier loop)"
            )
            print(
                f"compiled {LOOPS[r['loop']]}, {r['size']}, data {DATA[r['data']]}, "
                f"{precision_name(r['precision'])}: {spent}; frames compiled: "
                f"{r['frames_warmup']} in warm-up, {r['frames_timed']} over "
                f"{r['timed_batches']} timed batches"
            )
    busy = next((r for r in rows if r["kind"] == "busy" and r.get("loop", "qg") == "qg"), None)
    for r in (r for r in rows if r["kind"] == "busy"):
        steps = f", {r['kernels'] / r['steps']:.0f} a step" if r.get("steps") else ""
        print(
            f"GPU busy fraction of a steady {LOOPS[r.get('loop', 'qg')]} epoch at "
            f"{bench.sizes[1].label}: {r['fraction']:.1%} ({r['kernels']} kernels{steps} in "
            f"{r['seconds']:.3f} s, under the profiler, copies left out)"
        )
    if not busy and bench.device.type != "cuda":
        print("GPU busy fraction: N/A on a CPU")
    for r in rows:
        if r["kind"] == "prep":
            print(
                f"preparation at {r['elements']:,} elements: {r['ms_per_set']:.0f} ms per set "
                f"({r['sets']} sets, one process, on the host)"
            )
        elif r["kind"] == "memory":
            print(
                f"peak GPU memory of a training step on one set of {r['elements']:,} elements: "
                f"{r['peak_mb']:.0f} MB ({r['above_mb']:.0f} MB above the "
                f"{r['held_mb']:.0f} MB held before it)"
            )
        elif r["kind"] == "ddp":
            shown = fmt(r.get("graphs_per_s")) if not r.get("error") else f"error: {r['error']}"
            print(f"2 GPUs, {r['size']}, {r['batches']} batches: {shown} graphs/s")
        elif r["kind"] == "error":
            print(f"error in {r['what']}: {r['error']}")
    for what, why in bench.skipped:
        print(f"skipped: {what} ({why})")

    small, large = (s.name for s in bench.sizes)
    targets = []
    for size in (small, large):
        qg_rate, hand = rate(size, "qg"), rate(size, "hand")
        light = rate(size, "lightning")
        ratio = qg_rate / hand if qg_rate and hand else None
        targets.append(
            (
                f"qg / hand-written, {size} (device data, fp32, eager)",
                ratio,
                lambda v: v >= HAND_TARGET,
                f">= {HAND_TARGET}",
            )
        )
        ratio = qg_rate / light if qg_rate and light else None
        targets.append((f"qg / Lightning, {size}", ratio, lambda v: v > 1, "> 1"))
        work = rate(size, "hand-work")
        targets.append(
            (
                f"qg / hand-written with qg's work, {size} (device data, fp32, eager)",
                qg_rate / work if qg_rate and work else None,
                lambda v: v >= HAND_TARGET,
                f">= {HAND_TARGET}",
            )
        )
    pyg = rate(small, "pyg", "host")
    qg_small = rate(small, "qg")
    targets.append(
        (
            "qg (device data) / common PyG loop, small, fp32",
            qg_small / pyg if qg_small and pyg else None,
            lambda v: v >= PYG_TARGET,
            f">= {PYG_TARGET}",
        )
    )
    for loop in ("qg", "qg-padded"):
        compiled = rate(small, loop, compiled=True)
        targets.append(
            (
                f"{LOOPS[loop]} compiled / qg eager, small",
                compiled / qg_small if compiled and qg_small else None,
                lambda v: v >= COMPILE_TARGET,
                f">= {COMPILE_TARGET}",
            )
        )
    targets.append(
        (
            "GPU busy fraction, large",
            busy["fraction"] if busy else None,
            lambda v: v >= BUSY_TARGET,
            f">= {BUSY_TARGET:.0%}",
        )
    )
    qg_reads = [r["per_step"] for r in reads if r["loop"] == "qg" and "per_step" in r]
    targets.append(
        (
            "host reads per steady qg step (fp32, eager)",
            max(qg_reads) if qg_reads else None,
            lambda v: v == 0,
            "0",
        )
    )
    print("\n| target | wanted | measured | verdict |")
    print("|---|---|---|---|")
    for name, value, ok, wanted in targets:
        print(f"| {name} | {wanted} | {fmt(value, '.2f')} | {verdict(value, ok)} |")
    if bench.device.type != "cuda":
        print("\n(on a CPU the verdicts say nothing about a GPU: the targets are set for one)")


def padding_overrides() -> list[str]:
    """Batches of a fixed budget of nodes, padded to fixed shapes where the package can."""
    overrides = ["training.batch_nodes={nodes}", "training.pad_batches=true"]
    try:
        qg.load_config(ROOT / "configs" / "train.yaml", [o.format(nodes=64) for o in overrides])
    except qg.ConfigError:  # an earlier version: node budgets, unpadded
        return overrides[:1]
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, 1 repeat, compile off: a smoke test"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per loop")
    parser.add_argument("--warmup", type=int, default=1, help="untimed epochs per loop")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds after which no further work starts (240 on a GPU, 180 on a CPU)",
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "runs" / "bench_gpu.jsonl"),
        help="JSON-lines file of the rows, written as they finish",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROUPS,
        default=None,
        help="run only these groups of jobs (default: all, in the order of "
        + ", ".join(GROUPS)
        + "; the data is always prepared)",
    )
    parser.add_argument(
        "--data-root",
        default=str(ROOT / "data"),
        help="where the benchmark's causal sets are cached",
    )
    parser.add_argument(
        "--padded",
        nargs="+",
        default=None,
        help="config overrides of the padded batches ({nodes}: batch size x mean elements); "
        "default: training.batch_nodes={nodes} and training.pad_batches=true, the latter where "
        "this version of the package has it",
    )
    args = smoke.parse(parser, quick=True)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.time_limit is None:
        args.time_limit = 240.0 if args.device.startswith("cuda") else 180.0
    if args.padded is None:
        args.padded = padding_overrides()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here")
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (
            f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        )
    )
    today = datetime.date.today().isoformat()
    header = f"torch {torch.__version__}, {name}, {today}"
    print(header, file=sys.stderr, flush=True)  # the report prints it again, first
    bench = Bench(args)
    bench.write(
        "header",
        torch=torch.__version__,
        device=name,
        date=today,
        quick=args.quick,
        repeats=args.repeats,
        time_limit=args.time_limit,
    )
    try:
        schedule(bench)
        report(bench, header)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
