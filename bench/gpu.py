"""Training throughput on a GPU: graphs/s of qg.Trainer against the fastest hand-written PyG
loop, the common PyG loop and PyTorch Lightning, at 32-64 and at 1,024-2,048 elements, and
against loops doing the same work; and what keeps a GPU waiting (host reads, recompilations,
idle time).

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
- Lightning: `lightning_helpers` (a `bench` extra; skipped when not installed) over the fastest
  loop's list, its epoch timed from its own epoch-start to epoch-end callbacks.

The equal-work rows (fp32 eager cells, data on the device and on the host), where every loop
reshuffles, gathers and sums as qg does:
- Lightning, same work: Lightning as its users run it, PyG's `DataLoader` over the training
  graphs with `shuffle=True` (reshuffled each epoch; with data on the device, the graphs moved
  there once), the epoch's loss and accuracy logged with `self.log(..., on_epoch=True,
  on_step=False)`;
- hand-written, same work, own data: the loop doing qg's work (loss, right answers and the
  global gradient norm summed on the device), over batches of its own making: each epoch's
  order a `torch.randperm` seeded by the epoch, each batch gathered from the dataset's
  concatenated storage (x, edge_index shifted by node offsets, the batch vector, y);
- `qg.Trainer`, pre-made list: `train_epoch` over the fastest loop's list of batches, beside
  that loop, which stays the floor.
Their ratios are paired by round: each round's ratio of graphs/s (the two loops timed in the
same round), their median over `--rounds` rounds of `--passes` epochs each, with half the gap
between their quartiles as the spread.

Lightning runs without a logger (what is logged is reduced each epoch, not written) or
checkpoints.

Warm-up epochs are untimed (compiling happens there; its seconds are reported apart), then
`--repeats` epochs (in the fp32 eager cells `--rounds` rounds of `--passes` epochs) alternate
between the loops of a cell, so that a shared machine's noise falls on each alike; the clock is read
after `torch.cuda.synchronize()`; graphs/s = training graphs per epoch / median seconds. Besides:
host reads per steady training step (`HostReads`, over epochs of n and 2n batches of the real
loader: the difference per extra step; counted in the fp32 eager cells after their timed epochs),
frames compiled by dynamo (`torch._dynamo.utils.counters["frames"]["ok"]`, in warm-up and in the
timed epochs: torch 2.x keeps no recompilation counter of its own, and every compile after warm-up
is one), the GPU busy fraction of a steady qg epoch and of the fastest hand-written loop's at
1,024-2,048 elements, and their kernels per step (the union of the kernels' intervals from
`torch.profiler`, CUDA activity only, over the epoch's wall time), preparation ms per causal set at
2,048 and 8,192 elements (one process, a fresh cache) and the peak GPU memory of a training step on
one such set, and both kinds of batches with 2 GPUs when there are 2.

The run stops starting work at `--time-limit` seconds: the jobs run by importance (eager fp32
cells with data on the device, of every loop at both sizes; then host data; then bf16; then the
busy fraction; then compile with fp32 data on the device; then preparation, memory and 2 GPUs;
then the other compile cells, which seldom fit), and a job whose estimate (from what ran before
it) does not fit in the time left is skipped and listed. Every finished row is written to
`--out` (JSON lines) at once, so a run killed at its limit keeps what it measured.

    python bench/gpu.py [--quick] [--device cuda|cpu] [--repeats 5] [--rounds R] [--passes P]
                        [--time-limit SECONDS] [--only GROUP ...] [--out runs/bench_gpu.jsonl]

On a GPU: 2,000 sets of 32-64 elements and 256 of 1,024-2,048, 11 rounds of 2 epochs in the
equal-work cells, 360 s. On a CPU (`make bench`'s table): 600 and 24, as many rounds as
`--repeats` of one epoch, 180 s, where there is no launch overhead to remove and the verdicts
say nothing about a GPU.

`--quick` (tiny sizes, one repeat, compile off, bf16 at the small size only, no profiler)
finishes on a CPU in well under a minute: the test suite runs it as a smoke test of this script,
not for its figures.

The parts lie beside this script: `gpu_loops.py` (the loops), `gpu_cells.py` (the cells and the
run that times them), `gpu_schedule.py` (the order of the jobs) and `gpu_report.py` (the report).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import smoke  # noqa: E402
from gpu_cells import Bench  # noqa: E402
from gpu_report import report  # noqa: E402
from gpu_schedule import GROUPS, schedule  # noqa: E402

import QuantumGravPy as qg  # noqa: E402


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
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed rounds of the fp32 eager cells, whose ratios are paired by round "
        "(11 on a GPU, else --repeats)",
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=None,
        help="epochs per loop in each of those rounds (2 on a GPU, else 1)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed epochs per loop")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds after which no further work starts (360 on a GPU, 180 on a CPU)",
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
    long_rounds = args.device.startswith("cuda") and not args.quick
    if args.rounds is None:
        args.rounds = 11 if long_rounds else args.repeats
    if args.passes is None:
        args.passes = 2 if long_rounds else 1
    if args.time_limit is None:
        args.time_limit = 360.0 if args.device.startswith("cuda") else 180.0
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
        rounds=args.rounds,
        passes=args.passes,
        time_limit=args.time_limit,
    )
    try:
        schedule(bench)
        report(bench, header)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
