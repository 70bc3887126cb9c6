"""The report of `bench/gpu.py`: a table of graphs/s per size, the equal-work ratios (paired by
round, with their spread), what keeps a GPU waiting, and the targets with their verdicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from gpu_cells import Bench, precision_name
from gpu_loops import DATA, LOOPS

HAND_TARGET = 0.95  # qg.Trainer's graphs/s against the fastest hand-written loop's, at least
PYG_TARGET = 2.0  # against the common PyG loop at 32-64 elements, at least
COMPILE_TARGET = 1.3  # compiled (and padded) against eager at 32-64 elements, at least
BUSY_TARGET = 0.90  # GPU busy fraction of a steady epoch at 1,024-2,048 elements, at least
SPREAD_TARGET = 0.03  # half the quartiles' gap of an equal-work ratio, of its median, at most
# The ratios of the equal-work rows (fp32 eager cells): (numerator, denominator), each a loop;
# the cells' rounds pair them, each ratio taken within one round.
EQUAL_WORK = (
    ("qg", "hand-own"),
    ("qg", "hand-work"),
    ("qg", "lightning-work"),
    ("qg-list", "hand"),
    ("qg", "hand"),
    ("hand-own", "hand"),
    ("lightning-work", "hand-own"),
)


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "—" if value is None else format(value, spec)


def verdict(value: float | None, ok: Callable[[float], bool]) -> str:
    if value is None:
        return "not measured"
    return "met" if ok(value) else "MISSED"


def paired(a: dict | None, b: dict | None) -> tuple[float, float, int] | None:
    """The graphs/s of row ``a`` against row ``b`` of the same cell, round by round (the two
    timed in the same round, under the same load): the median of the rounds' ratios, half the
    gap between their quartiles (0 with one round), and the rounds."""
    if not a or not b or a.get("error") or b.get("error"):
        return None
    ratios = [
        (a["graphs"] / sa) / (b["graphs"] / sb)
        for sa, sb in zip(a["seconds"], b["seconds"], strict=True)
        if sa and sb
    ]
    if not ratios:
        return None
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (0, 0, 0)
    return statistics.median(ratios), (q3 - q1) / 2, len(ratios)


def shown_paired(value: tuple[float, float, int] | None) -> str:
    return "—" if value is None else f"{value[0]:.3f} ± {value[1]:.3f}"


def report(bench: Bench, header: str) -> None:
    rows = bench.rows
    cells = [r for r in rows if r["kind"] == "cell"]
    order = list(LOOPS)

    def key(r: dict) -> tuple:
        return (r["compile"], r["precision"] != "32", r["data"] != "device", order.index(r["loop"]))

    def row(size: str, loop: str, data="device", precision="32", compiled=False) -> dict | None:
        want = (size, loop, data, precision, compiled)
        for r in cells:
            if (r["size"], r["loop"], r["data"], r["precision"], r["compile"]) == want:
                return r
        return None

    def rate(size: str, loop: str, data="device", precision="32", compiled=False):
        r = row(size, loop, data, precision, compiled)
        return None if r is None else r.get("graphs_per_s")

    args = bench.args
    print(f"\n{header}\n")
    spreads: list[float] = []
    for size in bench.sizes:
        mine = sorted((r for r in cells if r["size"] == size.name), key=key)
        train = next((r["graphs"] for r in mine if r["loop"] == "qg" and "graphs" in r), None)
        timed = f"{args.repeats} timed"
        if (args.rounds, args.passes) != (args.repeats, 1):
            timed = (
                f"timed {args.rounds} rounds of {args.passes} "
                f"epoch{'s' if args.passes > 1 else ''} in the fp32 eager cells, "
                f"{args.repeats} in the others"
            )
        print(
            f"### {size.label}: {size.graphs} sets ({fmt(train, 'd')} for training), batch "
            f"{size.batch}; "
            f"epochs per loop: {args.warmup} warm-up, {timed}\n"
        )
        print(
            "| loop | data | precision | compile | graphs/s (median) | / hand-written | "
            "/ hand-written, paired by round (± half the quartiles' gap) |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in mine:
            hand = row(size.name, "hand", r["data"], r["precision"], r["compile"])
            hand_rate = hand.get("graphs_per_s") if hand else None
            value = r.get("graphs_per_s")
            ratio = value / hand_rate if value and hand_rate else None
            shown = fmt(value) if not r.get("error") else f"error: {r['error'][:80]}"
            name = LOOPS[r["loop"]]
            if r["loop"] == "qg-padded" and r.get("padded"):
                name += f" ({', '.join(r['padded'])})"
            precision = precision_name(r["precision"])
            compiled = "on" if r["compile"] else "off"
            print(
                f"| {name} | {DATA[r['data']]} | {precision} | {compiled} | {shown} | "
                f"{fmt(ratio, '.2f')} | {shown_paired(paired(r, hand))} |"
            )
        print()
        equal = []
        for data in DATA:
            for a, b in EQUAL_WORK:
                value = paired(row(size.name, a, data), row(size.name, b, data))
                if value is not None:
                    equal.append((a, b, data, value))
                    if value[2] > 1:  # one round has no spread
                        spreads.append(value[1] / value[0])
        if equal:
            print(f"Equal work at {size.label} (fp32, eager), paired by round:\n")
            print("| ratio of graphs/s | data | median of the rounds | ± half the quartiles' gap "
                  "| rounds |")  # fmt: skip
            print("|---|---|---|---|---|")
            for a, b, data, (median, spread, n) in equal:
                print(
                    f"| {LOOPS[a]} / {LOOPS[b]} | {DATA[data]} | {median:.3f} | "
                    f"{spread:.3f} ({spread / median:.1%}) | {n} |"
                )
            print()
    if spreads:
        print(
            f"The equal-work ratios' widest spread: ±{max(spreads):.1%} of the ratio (half the "
            f"gap between the quartiles of the rounds' ratios; wanted under {SPREAD_TARGET:.0%})."
        )
    elif any(r["loop"] == "hand-own" for r in cells):
        print("The equal-work ratios' spread: one round each, none to measure (--rounds).")

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
        own = paired(row(size, "qg"), row(size, "hand-own"))
        targets.append(
            (
                f"qg / hand-written, same work, own data, {size} (device data, paired)",
                own[0] if own else None,
                lambda v: v >= HAND_TARGET,
                f">= {HAND_TARGET}",
            )
        )
        light_work = paired(row(size, "qg"), row(size, "lightning-work"))
        targets.append(
            (
                f"qg / Lightning, same work, {size} (device data, paired)",
                light_work[0] if light_work else None,
                lambda v: v > 1,
                "> 1",
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
    targets.append(
        (
            "the equal-work ratios' widest spread, of the ratio",
            max(spreads) if spreads else None,
            lambda v: v < SPREAD_TARGET,
            f"< {SPREAD_TARGET:.0%}",
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
