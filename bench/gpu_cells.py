"""The cells of `bench/gpu.py`: the sizes, a cell (size x where the data is x precision x
compile), its loops, and the run (`Bench`) that builds and times them, counts their host reads
and runs the extras (busy fraction, preparation, memory, 2 GPUs), writing every row as it ends.
"""

from __future__ import annotations

import argparse
import copy
import gc
import itertools
import json
import os
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
from gpu_loops import (  # noqa: E402
    Batches,
    First,
    OwnBatches,
    common_pyg,
    hand_own_data,
    hand_same_work,
    hand_written,
    training_graphs,
    training_indices,
)
from host_reads import HostReads  # noqa: E402

import QuantumGravPy as qg  # noqa: E402

# What a compile of the default model's forward and backward is assumed to cost until this run
# has timed a compile cell: a guess, used only to decide whether the first one fits in the time
# left, never reported.
COMPILE_PRIOR_S = 40.0
BUSY_LOOPS = ("qg", "hand")  # whose GPU busy fraction is measured


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

    def run(self, phase: str, device: torch.device, passes: int = 1) -> None:
        """One measurement: ``passes`` epochs back to back, their mean seconds."""
        if self.error is not None:
            return
        before = frames_compiled() if self.compiled else 0
        try:
            seconds = sum(self.epoch() for _ in range(passes)) / passes
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

    def rounds(self, cell: Cell) -> tuple[int, int]:
        """Timed rounds of the cell, and epochs per loop in a round: the equal-work cells
        (fp32, eager) take ``--rounds`` of ``--passes``, the others ``--repeats`` of one."""
        if cell.precision == "32" and not cell.compiled:
            return self.args.rounds, self.args.passes
        return self.args.repeats, 1

    def epochs(self, cell: Cell) -> int:
        """Epochs each loop of ``cell`` trains: warm-up and timed."""
        rounds, passes = self.rounds(cell)
        return self.args.warmup + rounds * passes

    def cell_estimate(self, cell: Cell, names: list[str]) -> float | None:
        """Seconds: what the first cell of its size and compile took per loop and epoch, times
        its loops and epochs; for the first compile cell, the eager one's and a compile for each
        set of options (padded batches are compiled for their one shape, the others for dynamic
        shapes)."""
        seen = self.cell_seconds.get((cell.size.name, cell.compiled))
        if seen is not None:
            return seen[0] / seen[1] / seen[2] * len(names) * self.epochs(cell)
        eager = self.cell_seconds.get((cell.size.name, False))
        if cell.compiled and eager is not None:
            compiles = 2 if "qg-padded" in names else 1
            per_epoch = eager[0] / eager[1] / eager[2]
            return per_epoch * len(names) * self.epochs(cell) + COMPILE_PRIOR_S * compiles
        return None

    def plan(self, cell: Cell) -> list[str]:
        eager = not cell.compiled
        equal = eager and cell.precision == "32"  # the cells of the equal-work rows
        names = ["qg", "hand"]
        if cell.data == "device" and cell.precision == "32":
            names.insert(1, "qg-padded")
            if eager:
                names.append("hand-work")
        if equal:
            names.insert(names.index("hand") + 1, "qg-list")
            names.append("hand-own")
        if eager and self.lightning:
            names.append("lightning")
            if equal:
                names.append("lightning-work")
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
        rounds, passes = self.rounds(cell)
        for _ in range(self.args.warmup):
            for loop in loops:
                loop.run("warmup", self.device)
        for _ in range(rounds):  # a round: each loop in turn, so that noise falls on each alike
            for loop in loops:
                loop.run("timed", self.device, passes)
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
                "passes": passes,
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
            self.cell_seconds[key] = (time.perf_counter() - start, len(loops), self.epochs(cell))
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
            elif name == "qg-list":
                # a trainer of its own (the same weights: the same seed), over the fastest
                # loop's list of batches made once
                listed = qg.Trainer(self.config(size, cell.data, precision, *extra), dataset)
                listed.prepare_dataloaders()
                loops.append(
                    Loop(
                        name,
                        lambda t=listed: timed(device, lambda: t.train_epoch(Batches(batches))),
                        graphs,
                        len(batches),
                        steps=lambda n, t=listed: t.train_epoch(Batches(batches[:n])),
                        optimizer=listed.optimizer,
                    )
                )
            elif name == "hand-own":
                model = copy.deepcopy(model0)
                optimizer = optimizer_cls(model.parameters(), **opt.kwargs)
                own = OwnBatches(
                    dataset,
                    training_indices(dataset, config),
                    size.batch,
                    device,
                    on_host=cell.data == "host",
                )
                work = hand_own_data(model, optimizer, device, precision, own)
                loops.append(
                    Loop(
                        name,
                        lambda t=work: timed(device, t),
                        len(own.indices),
                        len(own),
                        steps=lambda n, t=work: t(n),
                        optimizer=optimizer,
                    )
                )
            elif name == "lightning":
                module = lightning_helpers.module(copy.deepcopy(model0), optimizer_cls, opt.kwargs)
                loops.append(self.lightning_loop(name, module, Batches(batches), precision, graphs))
            elif name == "lightning-work":
                from torch_geometric.loader import DataLoader

                # as its users run it: PyG's loader over the training graphs, reshuffled each
                # epoch (with data on the device, the graphs moved there once)
                data = training_graphs(dataset, config)
                if cell.data == "device":
                    data = [g.to(device) for g in data]
                loader = DataLoader(data, batch_size=size.batch, shuffle=True)
                module = lightning_helpers.module_same_work(
                    copy.deepcopy(model0), optimizer_cls, opt.kwargs
                )
                loops.append(self.lightning_loop(name, module, loader, precision, len(data)))
            elif name == "pyg":
                from torch_geometric.loader import DataLoader

                data = training_graphs(dataset, config)
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

    def lightning_loop(self, name: str, module, loader, precision: str, graphs: int) -> Loop:
        seconds: list[float] = []
        cuda = self.device.type == "cuda"
        options = {
            "accelerator": "gpu" if cuda else "cpu",
            "devices": [self.device.index or 0] if cuda else 1,
            "precision": "bf16-mixed" if precision == "bf16" else "32-true",
        }

        def epoch() -> float:
            trainer = lightning_helpers.trainer(1, seconds, **options)
            trainer.fit(module, train_dataloaders=loader)
            return seconds[-1]

        return Loop(name, epoch, graphs, len(loader))

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
