"""A training step on a CPU as a stand-in for a launch-bound GPU step: what each loop dispatches.

On a GPU a small model's step is bound by launches: each operation the host adds is a kernel
launch. On a CPU with one thread the same cost shows as operations dispatched and Python
called. Six loops train deep copies of one model (the shipped config's, at
``--hidden`` channels) with the config's optimizer, on batches of ``--batch`` causal sets of
``--points`` elements:
- `qg`: `qg.Trainer.train_epoch` over its own training loader (reshuffled, gathered, checked);
- `qg, data.device's path`: the same over batches gathered with torch operations, as with
  `data.device: cuda` on a GPU;
- `hand, qg's work`: a hand-written loop doing what qg's step does (`bench/gpu_loops.py`'s: the
  same loader, the loss and the right answers summed on the device, the global gradient norm);
- `hand, fastest`: a hand-written loop over one list of batches made once;
- `Lightning`: Lightning's Trainer over that list (a `bench` extra; left out without it);
- `Lightning, same work`: Lightning as its users run it, PyG's `DataLoader` over the training
  graphs reshuffled each epoch, the epoch's loss and accuracy logged with `on_epoch=True`.

Per optimizer step, over whole epochs (what runs once an epoch is shared out over its steps):
non-view aten operations dispatched (a `TorchDispatchMode`; views cost no launch), Python
calls (`sys.setprofile`'s call and c_call events: Python functions and the builtins they call;
each counted in a pass of its own), and main-thread CPU time (`time.thread_time`, the loops
interleaved epoch by epoch; each round's ratio to the loop doing qg's work, their median over
`--repeats` rounds with half the gap between its quartiles). The counts are deterministic: with
`--smoke`, the script fails if qg's step dispatches more operations beyond the loop doing its
work than `OPS_ABOVE_WORK`, or more calls than `CALLS_OVER_WORK` times that loop's.

    python bench/step.py [--graphs 400] [--repeats 21]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpu_loops  # noqa: E402  (the fastest hand-written loop and the one doing qg's work)
import lightning_helpers  # noqa: E402
import smoke  # noqa: E402

import QuantumGravPy as qg  # noqa: E402

# What qg's step may cost beyond the loop doing its work: a little over what --smoke's short
# epochs (7 steps, over which the epoch's gather is shared) measured when this was last
# lowered (+2.1 operations, 1.04x the calls; the targets are +2 and 1.1x, met at 35 steps an
# epoch: +0.4 and 1.04x). --smoke fails past them, so that the step cannot grow unseen.
OPS_ABOVE_WORK = 2.5
CALLS_OVER_WORK = 1.07


class Ops(TorchDispatchMode):
    """Counts the aten operations dispatched that are not views."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))


class Probe:
    """Operations, or Python calls, and CPU seconds between :meth:`start` and :meth:`stop`
    (operations and calls in passes of their own: the counting mode is Python too)."""

    def __init__(self, counting: str | None):
        self.counting = counting
        self.ops = self.calls = 0
        self.seconds = 0.0

    def _call(self, frame, event, arg) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def start(self) -> None:
        if self.counting == "ops":
            self.mode = Ops()
            self.mode.__enter__()
        elif self.counting == "calls":
            sys.setprofile(self._call)
        self.began = time.thread_time()

    def stop(self) -> None:
        self.seconds += time.thread_time() - self.began
        if self.counting == "ops":
            self.mode.__exit__(None, None, None)
            self.ops += self.mode.count
        elif self.counting == "calls":
            sys.setprofile(None)


class Loop:
    def __init__(self, name: str, steps: int, epoch: Callable[[Probe], None]):
        self.name, self.steps, self.epoch = name, steps, epoch
        self.seconds: list[float] = []
        self.ops = self.calls = 0.0

    def count(self) -> None:
        ops, calls = Probe(counting="ops"), Probe(counting="calls")
        self.epoch(ops)
        self.epoch(calls)
        self.ops, self.calls = ops.ops / self.steps, calls.calls / self.steps

    def time(self) -> None:
        probe = Probe(counting=None)
        self.epoch(probe)
        self.seconds.append(probe.seconds / self.steps)


def plain(probe: Probe, fn: Callable[[], object]) -> None:
    probe.start()
    fn()
    probe.stop()


def lightning(module, loader) -> Callable[[Probe], None]:
    import lightning as L

    def epoch(probe: Probe) -> None:
        class Measured(L.Callback):  # its epoch alone, not the fit's setup around it
            def on_train_epoch_start(self, trainer, pl_module):
                probe.start()

            def on_train_epoch_end(self, trainer, pl_module):
                probe.stop()

        lightning_helpers.quiet()
        trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[Measured()])  # fmt: skip
        trainer.fit(module, train_dataloaders=loader)

    return epoch


def build(args: argparse.Namespace, tmp: str, *, with_lightning: bool = True) -> list[Loop]:
    lo, hi = args.points
    config = qg.load_config(
        ROOT / "configs" / "train.yaml",
        [f"data.root={tmp}/data", f"data.num_graphs={args.graphs}", f"data.num_points=[{lo},{hi}]",
         "data.storage=memory", "training.device=cpu", f"training.batch_size={args.batch}",
         f"model.hidden_channels={args.hidden}", f"training.path={tmp}/run",
         "training.plots=false", "early_stopping.enabled=false", "log_level=WARNING"],
    )  # fmt: skip
    trainer = qg.Trainer(config)
    model0 = copy.deepcopy(trainer.model)
    loader, _, _ = trainer.prepare_dataloaders()
    batches = list(loader)
    steps = len(batches)
    opt = config.training.optimizer
    optimizer_cls = qg.config.resolve(opt.type, key="")
    device = torch.device("cpu")

    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = copy.deepcopy(model0)
        return model, optimizer_cls(model.parameters(), **opt.kwargs)

    work = gpu_loops.hand_same_work(*fresh(), device, "32", loader)
    fastest = gpu_loops.hand_written(*fresh(), device, "32", on_host=False)
    # data.device's path (the GPU default), here on the CPU: the dataset's tensors gathered
    # with torch operations, as on a GPU
    trainer.batch_device = device
    on_device = trainer.make_train_loader(loader.graphs)
    loops = [
        Loop("qg", steps, lambda p: plain(p, lambda: trainer.train_epoch(loader))),
        Loop(
            "qg, data.device's path",
            steps,
            lambda p: plain(p, lambda: trainer.train_epoch(on_device)),
        ),
        Loop("hand, qg's work", steps, lambda p: plain(p, work)),
        Loop("hand, fastest", steps, lambda p: plain(p, lambda: fastest(batches))),
    ]
    if with_lightning and lightning_helpers.available():
        from torch_geometric.loader import DataLoader

        model, _ = fresh()
        module = lightning_helpers.module(model, optimizer_cls, opt.kwargs)
        loops.append(Loop("Lightning", steps, lightning(module, gpu_loops.Batches(batches))))
        model, _ = fresh()
        module = lightning_helpers.module_same_work(model, optimizer_cls, opt.kwargs)
        graphs = gpu_loops.training_graphs(trainer.dataset, config)
        shuffled = DataLoader(graphs, batch_size=args.batch, shuffle=True)
        loops.append(Loop("Lightning, same work", len(shuffled), lightning(module, shuffled)))
    return loops


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graphs", type=int, default=400)
    parser.add_argument("--points", type=int, nargs=2, default=(16, 24))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=21)
    return parser


def main() -> int:
    args = smoke.parse(parser(), graphs=80, repeats=1)
    torch.set_num_threads(1)  # the stand-in: one thread, so every operation costs its dispatch
    with tempfile.TemporaryDirectory() as tmp:
        loops = build(args, tmp)
        for loop in loops:
            loop.time()  # a warm-up epoch each, untimed: first calls, allocations
            loop.seconds.clear()
            loop.count()
        for r in range(args.repeats):  # interleaved, so that a busy machine slows each alike
            for loop in loops[r % len(loops) :] + loops[: r % len(loops)]:
                loop.time()
    work = next(loop for loop in loops if loop.name == "hand, qg's work")
    steps = loops[0].steps
    print(f"{args.hidden} channels, batches of {args.batch} causal sets of "
          f"{args.points[0]}-{args.points[1]} elements, one thread; {steps} steps an epoch, "
          f"median of {args.repeats} epochs each:\n")  # fmt: skip
    print("| loop | non-view ops a step | Python calls a step | CPU µs a step | time against "
          "qg's work loop (± half the quartiles' gap) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for loop in loops:
        seconds = statistics.median(loop.seconds)
        # each round's ratio: the two loops timed back to back, under the same load
        ratios = [a / b for a, b in zip(loop.seconds, work.seconds, strict=True)]
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (0, 0, 0)
        print(f"| {loop.name} | {loop.ops:.1f} | {loop.calls:,.0f} | {seconds * 1e6:,.0f} | "
              f"{statistics.median(ratios):.3f}x ± {(q3 - q1) / 2:.3f} |")  # fmt: skip
    qg_loop = loops[0]
    above, over = qg_loop.ops - work.ops, qg_loop.calls / work.calls
    print(f"\nqg's step: {above:+.1f} ops and {over:.2f}x the calls of the loop doing its work "
          f"(ceilings {OPS_ABOVE_WORK:+.1f} and {CALLS_OVER_WORK:.2f}x; the issue's targets "
          "+2 and 1.1x)")  # fmt: skip
    if above > OPS_ABOVE_WORK or over > CALLS_OVER_WORK:
        print("error: qg's step grew past its ceilings", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
