"""Run the physics studies and write STUDIES.md: the machine, the date, and each study's tables.

    python studies/run.py [--output STUDIES.md] [--only SCRIPT ...]

`make studies` runs this, then studies/physics_page.py (the tables of the Physics page and the
README's line on the baselines, from the new STUDIES.md). Each study runs in its own process,
one after the other; together they take several hours of this 2-core machine (`--only` reruns
some and keeps the other sections). order_bound.py and curvature_signal.py are longer
experiments run by hand; the Physics page quotes what they printed.
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
    note = "Each study's targets and bounds are explained in docs/physics.md."
    write_report(SCRIPTS, HERE, output, args.only, "Physics studies", "make studies", note=note)
    if output.resolve() == physics_page.STUDIES:
        return physics_page.main(["--write"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
