"""The Physics page's tables and the README's line on the baselines, generated from STUDIES.md.

    python studies/physics_page.py [--write README.md docs/physics.md]

`make studies` (studies/run.py) writes STUDIES.md and then runs this, so the figures the Physics
page quotes are those of the last run of the studies; studies/tests/test_physics_page.py fails
when a block is not what this script makes of the current STUDIES.md. It reads the tables as
bench/headline.py reads BENCHMARKS.md (the same functions), and a table whose shape changed is
an error naming the study and the row.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import headline  # noqa: E402
from headline import (  # noqa: E402
    BenchmarksError,
    Row,
    number,
    section,
    sections,
    stamped,
    tables,
)

STUDIES = ROOT / "STUDIES.md"
BLOCKS = {  # marker name: what it holds
    "physics": "the README's line: each embedded kind's GNN against the best classical method",
    "baselines": "the GNN against the best classical method on each embedded kind",
    "ricci": "each element's Ricci scalar: R^2 against the number of elements, with the bound",
}
TARGETS = ("README.md", "docs/physics.md")


def baselines_row(s: dict[str, str]) -> Row:
    rows = baseline_rows(s)
    ahead, level, behind = [], [], []
    for kind, n, _, best, gnn in rows:
        # test splits of 90 to 1,800 graphs (600 for most): 2 points of noise is the margin
        lead = number(gnn) - number(best)
        name = f"{kind} ({n})" if sum(r[0] == kind for r in rows) > 1 else kind
        (ahead if lead > 0.02 else behind if lead < -0.02 else level).append(name)
    shown = [r for r in rows if r[0] in ("manifold_like", "cset_type", "ricci")]

    def named(kind: str, n: str) -> str:
        return f"{kind} ({n})" if sum(r[0] == kind for r in rows) > 1 else kind

    ours = ", ".join(f"{named(kind, n)} **{gnn}**" for kind, n, _, _, gnn in shown)
    peers = "; ".join(f"{named(kind, n)}: {method} {best}" for kind, n, method, best, _ in shown)
    verdict = "; ".join(
        f"{word} on {', '.join(kinds)}"
        for word, kinds in (("ahead", ahead), ("level", level), ("behind", behind))
        if kinds
    )
    manifold = next(number(r[4]) for r in rows if r[0] == "manifold_like")
    return (
        "each embedded kind's shipped GNN against the best classical method on the same test "
        "split (`studies/baselines.py`; [Physics](docs/physics.md))",
        f"{ours}; {verdict} (±0.02)",
        peers,
        f"manifold_like F1 ≥ 0.98: {'met' if manifold >= 0.98 else '**not met**'}",
    )


def baseline_rows(s: dict[str, str]) -> list[tuple[str, str, str, str, str]]:
    """(kind, elements, the best classical method, its score, the GNN's score) per kind."""
    t = section(s, "baselines.py", "studies")
    rows = [row for table in tables(t) for row in table if "method" in row]
    if not rows:
        raise BenchmarksError("studies/baselines.py: no table of methods")
    out = []
    for key in dict.fromkeys((r["kind"], r["elements"]) for r in rows):
        mine = [r for r in rows if (r["kind"], r["elements"]) == key]
        gnn = [r for r in mine if r["method"].startswith("the GNN")]
        classical = [r for r in mine if not r["method"].startswith("the GNN")]
        if len(gnn) != 1 or not classical:
            raise BenchmarksError(f"studies/baselines.py: {key} lacks the GNN or a baseline")
        top = max(classical, key=lambda r: number(r["test score"]))
        out.append(
            (
                *key,
                top["method"],
                top["test score"].split(" ")[-1],
                gnn[0]["test score"].split(" ")[-1],
            )
        )
    return out


def baselines_block(text: str) -> str:
    lines = [
        "| kind | elements | the best classical method | its score | the shipped GNN |",
        "|---|---|---|---|---|",
    ]
    for kind, n, method, score, gnn in baseline_rows(sections(text)):
        lines.append(f"| `{kind}` | {n} | {method} | {score} | **{gnn}** |")
    return "\n".join(lines)


def ricci_block(text: str) -> str:
    """The ricci curve: the bound, the GNN and each baseline, one column per size."""
    s = sections(text)
    rows = [row for table in tables(section(s, "baselines.py", "studies")) for row in table
            if row.get("kind") == "ricci"]  # fmt: skip
    bound = {row["elements"]: row for table in tables(section(s, "ricci_bound.py", "studies"))
             for row in table if "elements" in row}  # fmt: skip
    sizes = list(dict.fromkeys(r["elements"] for r in rows))
    if not rows or not bound:
        raise BenchmarksError("studies/baselines.py or studies/ricci_bound.py: no ricci curve")

    smeared = "smeared Benincasa-Dowker estimate (smearing and scale chosen on validation)"

    def method(row: dict[str, str]) -> str:
        name = row["method"].strip("*")
        if name.startswith("smeared"):
            return smeared
        if name.startswith("the GNN"):
            return "the shipped GNN (`configs/ricci.yaml`; `ricci_large.yaml` from 1,024)"
        return name

    def r2(row: dict[str, str]) -> str:
        value = row["test score"].split(" ")[-1]
        chosen = re.search(r"epsilon ([0-9.]+)", row["method"])
        return f"{value} (epsilon {chosen.group(1)})" if chosen else value

    key = next(k for k in next(iter(bound.values())) if k.endswith("(the bound)"))
    lines = ["| elements | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
    ceiling = [bound[n][key].split(" ")[0].strip("*") if n in bound else "" for n in sizes]
    lines.append("| the most any model of the order can reach (`studies/ricci_bound.py`) | "
                 + " | ".join(ceiling) + " |")  # fmt: skip
    models = {  # reports before them had none, or not all, of these columns
        "R^2 of the posterior mean given the coordinates (a bound)": "a looser bound: the "
        "posterior given the coordinates",
        "a model of the order: the same": "the same posterior given the order alone (its "
        "light-cone ranks for coordinates)",
        "a model of the order: the posterior given": "the order's own posterior (the "
        "likelihood of its light-cone ranks)",
    }
    columns = {k for row in bound.values() for k in row}  # tables of either age, side by side
    for start, row in models.items():
        column = next((k for k in sorted(columns) if k.startswith(start)), None)
        if column:
            reached = [bound.get(n, {}).get(column, "").split(" ")[0] for n in sizes]
            lines.append(f"| {row} | " + " | ".join(reached) + " |")
    for name in dict.fromkeys(method(r) for r in rows):
        cells = {r["elements"]: r2(r) for r in rows if method(r) == name}
        cells = [cells.get(n, "") for n in sizes]
        shown = [f"**{c}**" for c in cells] if "GNN" in name else cells
        lines.append(f"| {name} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def physics_block(text: str, in_docs: bool = False) -> str:
    lines = [
        "| study | the shipped GNN | the best classical method | target |",
        "|---|---|---|---|",
    ]
    lines.append("| " + " | ".join(baselines_row(sections(text))) + " |")
    table = "\n".join(lines)
    return table.replace("](docs/", "](") if in_docs else table


def block(name: str, path: str, text: str) -> str:
    """The generated block ``name`` as it stands in ``path`` (links relative to that file)."""
    if name == "physics":
        body = physics_block(text, in_docs=path.startswith("docs/"))
    elif name == "baselines":
        body = baselines_block(text)
    else:
        body = ricci_block(text)
    return stamped(name, body, text, "STUDIES.md", "studies/physics_page.py")


def main(argv: list[str] | None = None) -> int:
    return headline.main(
        argv,
        source=STUDIES,
        shown=lambda text: f"{baselines_block(text)}\n\n{ricci_block(text)}",
        targets=TARGETS,
        blocks=BLOCKS,
        make=block,
    )


if __name__ == "__main__":
    sys.exit(main())
