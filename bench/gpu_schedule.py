"""The order of `bench/gpu.py`'s work: its jobs by importance, each run only if its estimate fits
in the time left (`Bench.job`), and the preparation and memory jobs.
"""

from __future__ import annotations

import torch
from gpu_cells import Bench, Cell, release

# The groups of jobs, in the order they run (--only picks some): fp32 eager cells with data on
# the device, with data on the host, bf16 eager cells, the busy fraction, fp32 compiled cells
# with data on the device, preparation and memory, 2 GPUs, the other compiled cells.
GROUPS = ("eager", "host", "bf16", "busy", "compiled", "prep", "gpus", "other-compiled")
# Preparation grows with the square of the elements (the causal matrix): how the cost of the
# 8,192-element sets is guessed from that of the 2,048-element ones.
PREP_GROWTH = (8192 / 2048) ** 2


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
