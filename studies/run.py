"""Run the physics studies and write STUDIES.md: the machine, the date, and each study's tables.

    python studies/run.py [--output STUDIES.md] [--only SCRIPT ...]

`make studies` runs this, then studies/physics_page.py (the tables of the Physics page and the
README's line on the baselines, from the new STUDIES.md). Each study runs in its own process,
one after the other; together they take several hours of this 2-core machine (`--only` reruns
some and keeps the other sections). order_bound.py and curvature_signal.py are longer
experiments run by hand; the findings quote what they printed.

STUDIES.md opens with the findings: the write-up of what the studies show, between the markers
of FINDINGS, under the header. Only the sections after it are generated, so a new report
carries the findings over from the old one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "bench"))
import physics_page  # noqa: E402
from report import write_report  # noqa: E402  (the benchmarks' runner: one report format)

FINDINGS = ("<!-- findings:start -->", "<!-- findings:end -->")
NOTE = "The findings come first; each study's section, with its tables, follows them."

SCRIPTS = (
    ("baselines.py", "Analytic baselines: the best classical method on each embedded kind"),
    ("readout.py", "The default read-out: mean and spread against mean, maximum and scaled sum"),
    ("curvature_bound.py", "Curvature: the most any model of the causal order can reach"),
    ("order_ceiling.py", "Curvature: a lower ceiling for models of the order, with no mixing"),
    ("ricci_bound.py", "Each element's Ricci scalar: the most any model of the order can reach"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(physics_page.STUDIES))
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SCRIPT",
        help="run only these studies and replace their sections in an existing report",
    )
    args = parser.parse_args()
    output = Path(args.output)
    write_report(
        SCRIPTS, HERE, output, args.only, "Physics studies", "make studies", note=note(output)
    )
    if output.resolve() == physics_page.STUDIES:
        return physics_page.main(["--write"])
    return 0


def findings(path: Path) -> str:
    """The findings of the report at ``path``, markers included ("" when it has none)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start, end = FINDINGS
    if start not in text or end not in text:
        return ""
    return text[text.index(start) : text.index(end) + len(end)]


def note(path: Path) -> str:
    """The header's note: NOTE, then the findings of the report being replaced. They hold no
    level-2 heading, so that --only, which keeps the header, keeps them too."""
    kept = findings(path)
    if "\n## " in kept:
        raise ValueError(f"{path}: the findings hold a level-2 heading, which starts a section")
    return f"{NOTE}\n\n{kept}" if kept else NOTE


if __name__ == "__main__":
    sys.exit(main())
