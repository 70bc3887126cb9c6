"""The headline tables of README.md and the documentation, generated from BENCHMARKS.md.

    python bench/headline.py [--write README.md docs/benchmarks.md docs/physics.md]

`make bench` (bench/report.py) writes BENCHMARKS.md and then runs this, so the figures the README
and the site quote are those of the last benchmark run and cannot drift from it;
`tests/test_docs.py` fails when a block is not what this script makes of the current
BENCHMARKS.md. Each figure is looked up in the table of the section that measured it; a table
whose shape changed is an error naming the section and the row, not a silently wrong figure.
Every comparison is against the strongest peer or baseline the benchmark ran.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
BLOCKS = {  # marker name: what it holds
    "benchmarks": "the headline benchmark table",
    "world-size": "how far weights on 2 and 4 processes drift from 1 process's, per epoch",
}
TARGETS = ("README.md", "docs/benchmarks.md", "docs/reproducibility.md")


class BenchmarksError(Exception):
    """BENCHMARKS.md lacks a figure the headline needs (a benchmark's output changed shape)."""


# --- reading BENCHMARKS.md --------------------------------------------------------------------


def sections(text: str) -> dict[str, str]:
    """Each ``## `` section's text by the start of its title (the script's name is in it)."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def section(found: dict[str, str], script: str, folder: str = "bench") -> str:
    for text in found.values():
        if f"`python {folder}/{script}`" in text:
            return text
    raise BenchmarksError(f"no section from {folder}/{script} in the report")


def tables(text: str) -> list[list[dict[str, str]]]:
    """The markdown tables of ``text``: rows as dicts keyed by the header's cells."""
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = cells(line)
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(header, cells(row), strict=False)))
            found.append(rows)
    return found


def cells(line: str) -> list[str]:
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]


def lookup(text: str, script: str, column: str, **match: str) -> str:
    """The ``column`` of the one row whose cells start with ``match``'s values."""
    for table in tables(text):
        for row in table:
            if column in row and all(row.get(k, "").startswith(v) for k, v in match.items()):
                return row[column]
    raise BenchmarksError(f"bench/{script}: no row {match} with a column {column!r}")


def number(cell: str) -> float:
    found = re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", cell.replace(",", ""))
    if not found:
        raise BenchmarksError(f"not a number: {cell!r}")
    return float(found[-1])  # "f1 0.9902": the score, not the 1 of f1


def met(text: str, script: str, label: str) -> str:
    """The verdict (met / MISSED) of the target line that starts with ``label``."""
    for line in text.splitlines():
        line = line.lstrip("- ")
        if line.startswith(label):
            m = re.search(r"\b(met|MISSED|not met)\b", line)
            if m:
                return "met" if m.group(1) == "met" else "**not met**"
    raise BenchmarksError(f"bench/{script}: no target line starting {label!r}")


# --- the headline rows --------------------------------------------------------------------------

Row = tuple[str, str, str, str]  # benchmark, ours, the strongest peer, target


def overhead(s: dict[str, str]) -> Row:
    t = section(s, "overhead.py")
    ours = lookup(t, "overhead.py", "/ hand-written", loop="`qg.Trainer`")
    lightning = lookup(t, "overhead.py", "/ hand-written", loop="Lightning")
    return (
        "one training epoch against a hand-written PyTorch/PyG loop (`bench/overhead.py`)",
        f"`qg.Trainer` **{ours}×** the hand-written loop",
        f"Lightning's `Trainer` {lightning}×",
        f"≤ 1.05: {met(t, 'overhead.py', 'qg.Trainer / hand-written')}",
    )


def scaling(s: dict[str, str]) -> Row:
    t = section(s, "ddp_scaling.py")

    def speedup(batch: str, name: str) -> str:
        value = lookup(
            t, "ddp_scaling.py", "speed-up", **{"global batch": batch, "configuration": name}
        )
        return f"{number(value):.2f}×"

    both = lambda name: " / ".join(speedup(b, name) for b in ("32", "128"))
    peers = {
        "hand-written DDP": both("hand-written DDP, 2 processes, 1 thread each"),
        "Lightning DDP": both("Lightning Trainer, strategy ddp"),
    }
    return (
        "speed-up of 2 processes over 1, global batch 32 / 128 (`bench/ddp_scaling.py`)",
        f"`qg.TrainerDDP` **{both('qg.TrainerDDP, 2 processes, shared memory')}**",
        "; ".join(f"{k} {v}" for k, v in peers.items())
        + f"; no exchange at all (the ceiling) {both('ceiling')}",
        f"≥ 1.6×: {met(t, 'ddp_scaling.py', 'global batch 32: speed-up')}",
    )


def monitor(s: dict[str, str]) -> Row:
    t = section(s, "monitor.py")
    cost = " / ".join(lookup(t, "monitor.py", "the cost", processes=p) for p in ("1", "2"))
    return (
        "the monitor's defaults (timing, gradient and replica checks), 1 / 2 processes "
        "(`bench/monitor.py`)",
        f"**{cost}** epoch time",
        "",
        f"≤ 2 %: {met(t, 'monitor.py', 'the cost')}",
    )


def data_path(s: dict[str, str]) -> Row:
    t = section(s, "data_path.py")

    def real(storage: str) -> str:
        return " / ".join(
            lookup(
                t,
                "data_path.py",
                "real / pre-collated",
                storage=storage,
                **{"global batch": "32", "processes": p},
            ).split(" ")[0]
            for p in ("1", "2")
        )

    pyg = " / ".join(
        lookup(
            t,
            "data_path.py",
            "PyG DataLoader / pre-collated",
            storage="memory",
            **{"global batch": "32", "processes": p},
        ).split(" ")[0]
        for p in ("1", "2")
    )
    return (
        "a training epoch as a user runs it against the same batches collated beforehand, "
        "batch 32, 1 / 2 processes (`bench/data_path.py`)",
        f"memory **{real('memory')}×**, disk **{real('disk')}×**",
        f"PyTorch Geometric's `DataLoader` {pyg}× (memory)",
        "≤ 1.05 memory, ≤ 1.10 disk: "
        + met(t, "data_path.py", "real / pre-collated at batch 32, disk"),
    )


def samplers(s: dict[str, str]) -> Row:
    t = section(s, "samplers.py")
    ours = lookup(t, "samplers.py", "s/epoch", sampler="qg.DistributedWeightedRandomSampler")
    theirs = lookup(t, "samplers.py", "s/epoch", sampler="Lightning DistributedSamplerWrapper")
    mb = lookup(t, "samplers.py", "peak MB during the epoch", sampler="Lightning")
    return (
        "one rank's epoch of a weighted sampler, N = 2,000,000, W = 8 (`bench/samplers.py`)",
        f"`qg.DistributedWeightedRandomSampler` **{ours} s**",
        f"Lightning's `DistributedSamplerWrapper` {theirs} s, {mb} MB "
        f"({number(theirs) / number(ours):.1f}× slower)",
        f"≥ 10×: {met(t, 'samplers.py', 'Lightning wrapper')}",
    )


def invariance(s: dict[str, str]) -> Row:
    t = section(s, "invariance.py")
    ratios = []
    for batch in ("384", "48"):
        part = t[t.index(f"at global batch {batch} ") :]
        ratios.append(
            lookup(part, "invariance.py", "x 2 processes, DDP", run="2 processes, invariant")
        )
    return (
        "`parallel.strategy: invariant` (the same bits on any number of processes) on 2 processes, "
        "global batch 384 / 48 (`bench/invariance.py`)",
        f"**{ratios[0]}× / {ratios[1]}×** standard DDP's epoch",
        "",
        f"≤ 1.3× at 384: {met(t[t.index('at global batch 384 ') :], 'invariance.py', 'target')}",
    )


def memory(s: dict[str, str]) -> Row:
    t = section(s, "memory.py")
    fsdp = " / ".join(
        lookup(t, "memory.py", "x ddp's", processes=p, strategy="fsdp") for p in ("2", "4")
    )
    return (
        "what each rank holds of a 23-million-parameter model, 2 / 4 processes (`bench/memory.py`)",
        f"`fsdp` **{fsdp}×** ddp's",
        "",
        f"≤ 1/W + 10 %: {met(t, 'memory.py', 'fsdp, 4 processes')}",
    )


ROWS: tuple[Callable[[dict[str, str]], Row], ...] = (
    overhead,
    scaling,
    data_path,
    monitor,
    samplers,
    memory,
    invariance,
)


def benchmarks_block(text: str, in_docs: bool = False) -> str:
    """The headline table; its links written from the repository root, or from docs/."""
    s = sections(text)
    lines = ["| benchmark | ours | the strongest peer | target |", "|---|---|---|---|"]
    for make in ROWS:
        lines.append("| " + " | ".join(make(s)) + " |")
    table = "\n".join(lines)
    return table.replace("](docs/", "](") if in_docs else table


def world_size_block(text: str) -> str:
    t = section(sections(text), "invariance.py")
    rows = next((table for table in tables(t) if table and "precision" in table[0]), None)
    if rows is None:
        raise BenchmarksError("bench/invariance.py: no table of weight differences")
    header = list(rows[0])
    lines = [
        "| " + " | ".join(h.replace(" x ", " × ") for h in header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells_ = [row[h] for h in header]
        cells_[0] = f'`"{cells_[0]}"`'
        cells_[1] = cells_[1].replace(" x ", " × ")
        lines.append("| " + " | ".join(cells_) + " |")
    return "\n".join(lines)


def block(name: str, path: str, text: str) -> str:
    """The generated block ``name`` as it stands in ``path`` (links relative to that file)."""
    if name == "benchmarks":
        body = benchmarks_block(text, in_docs=path.startswith("docs/"))
    else:
        body = world_size_block(text)
    return stamped(name, body, text, "BENCHMARKS.md", "bench/headline.py")


def stamped(name: str, body: str, text: str, source: str, script: str) -> str:
    """``body`` between the markers of block ``name``, saying where it came from."""
    stamp = re.search(r"on (\d{4}-\d\d-\d\d)", text)
    return (
        f"<!-- {name}:start -->\n<!-- generated from {source}"
        f"{' of ' + stamp.group(1) if stamp else ''} by `python {script} --write`; "
        f"edit {script} instead -->\n\n{body}\n\n<!-- {name}:end -->"
    )


def update(path: Path, text: str, blocks=None, make=None) -> bool:
    """Replace every generated block (of ``blocks``, made by ``make(name, path, text)``) in
    ``path``; True when something changed."""
    blocks, make = blocks or BLOCKS, make or block
    old = path.read_text(encoding="utf-8")
    new = old
    for name in blocks:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start in new:
            a, b = new.index(start), new.index(end) + len(end)
            rel = str(path.resolve().relative_to(ROOT))
            new = new[:a] + make(name, rel, text) + new[b:]
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old


def main(
    argv: list[str] | None = None,
    *,
    source: Path = BENCHMARKS,
    shown: Callable[[str], str] | None = None,
    targets: tuple[str, ...] = TARGETS,
    blocks: dict[str, str] = BLOCKS,
    make: Callable[[str, str, str], str] = block,
) -> int:
    """Print the tables made of ``source`` (``shown``), or ``--write`` them into ``targets``'
    ``blocks`` (each made by ``make``); studies/physics_page.py runs it for STUDIES.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", nargs="*", metavar="MARKDOWN", default=None)
    args = parser.parse_args(argv)
    text = source.read_text(encoding="utf-8")
    try:
        if args.write is None:
            print((shown or benchmarks_block)(text))
            return 0
        for name in args.write or targets:
            changed = update(ROOT / name, text, blocks, make)
            print(f"{name}: {'updated' if changed else 'already current'}")
    except BenchmarksError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
