"""Run every benchmark and write BENCHMARKS.md: the machine, the date, and each script's tables.

    python bench/report.py [--output BENCHMARKS.md]

`make bench` runs this, then `bench/headline.py` (the README's and the site's headline tables,
from the new BENCHMARKS.md). Each script runs in its own process, one after the other, so they
do not compete for the cores; their own output (markdown tables, with the targets they check) is
copied under a heading that says what they compare.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import headline

from QuantumGravPy.runs.reproducibility import cpu_name

ROOT = Path(__file__).resolve().parent.parent

SCRIPTS = (
    ("startup.py", "Start-up: the package and the command line against `import torch`"),
    ("overhead.py", "Framework overhead: `qg.Trainer` against a hand-written loop and Lightning"),
    ("ddp_scaling.py", "1 against 2 processes: ours, a hand-written DDP loop and Lightning's DDP"),
    ("monitor.py", "The cost of looking inside a run: the monitor's defaults against none"),
    ("data_path.py", "The data path: real epochs against the model's work alone and PyG's loader"),
    (
        "samplers.py",
        "Distributed samplers: ours against Lightning's wrapper and DistributedSampler",
    ),
    ("invariance.py", "World-size invariance and the cost of full-state checkpoints"),
    ("threads.py", "One thread per process: the cost of pinning for invariance and prediction"),
    ("memory.py", "Past one device's memory: ZeRO, FSDP and activation checkpointing"),
    ("compile.py", "training.compile on this CPU: compiled against plain epochs"),
    (
        "gpu.py",
        "Training on a GPU (here the CPU): qg.Trainer against the fastest hand-written loop, "
        "the common PyG loop and Lightning",
    ),
    ("generation.py", "Causal-set generation throughput"),
    ("data_files.py", "Your data on disk: preprocessing Zarr files, disk storage, memory"),
    ("predict.py", "Predicting on a large HDF5 file: qg predict's time and memory"),
    ("baselines.py", "Analytic baselines: the best classical method on each embedded kind"),
    ("readout.py", "The default read-out: mean and spread against mean, maximum and scaled sum"),
    ("scale.py", "The field's size: 1,024-2,048-element causal sets, prepared and trained"),
    ("curvature_bound.py", "Curvature: the most any model of the causal order can reach"),
    ("order_ceiling.py", "Curvature: a lower ceiling for models of the order, with no mixing"),
    ("ricci_bound.py", "Each element's Ricci scalar: the most any model of the order can reach"),
)


MEASURED_ELSEWHERE = "Training on a GPU: `bench/gpu.py` on "


def docstring_lead(path: Path) -> str:
    """The first paragraph of a script's docstring after its title, as markdown."""
    text = path.read_text(encoding="utf-8").split('"""')[1]
    for paragraph in text.split("\n\n")[1:]:
        lines = [line.strip() for line in paragraph.strip().splitlines()]
        if not lines or lines[0].startswith("python "):
            continue  # a usage line
        out: list[str] = []
        for line in lines:
            if line.startswith("- ") or not out:
                out.append(("\n" if line.startswith("- ") and len(out) == 1 else "") + line)
            elif out[-1].lstrip().startswith("- ") and not line.startswith("- "):
                out[-1] += " " + line
            else:
                out[-1] += " " + line
        return "\n".join(out)
    return text.strip().splitlines()[0]  # no paragraph beyond the title: the title itself


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SCRIPT",
        help="run only these scripts and replace their sections in an existing report",
    )
    args = parser.parse_args()
    output_path = Path(args.output)
    existing = _sections(output_path.read_text(encoding="utf-8")) if output_path.exists() else {}
    previous = existing if args.only else {}
    # figures taken on a lent GPU (bench/gpu.py there): no run on this machine replaces them
    elsewhere = {t: text for t, text in existing.items() if t.startswith(MEASURED_ELSEWHERE)}
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    sections = []
    for script, title in SCRIPTS:
        if args.only and script not in args.only and title in previous:
            sections.append(previous[title])
            if script == "gpu.py":
                sections.extend(elsewhere.values())
            continue
        path = ROOT / "bench" / script
        print(f"running bench/{script} ...", flush=True)
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=ROOT
        )
        minutes = (time.perf_counter() - start) / 60
        output = result.stdout.strip()
        if result.returncode != 0:
            output += (
                f"\n\n**failed** (exit {result.returncode}):\n\n```\n{result.stderr[-3000:]}\n```"
            )
        elif "|---" not in output:
            output = f"```\n{output}\n```"
        when = f"{minutes:.1f} min"
        if args.only:  # the header names the run the other sections are from
            when += f"; rerun {datetime.now(timezone.utc):%Y-%m-%d} on {cpu_name()}"
        sections.append(
            f"## {title}\n\n`python bench/{script}` ({when}). {docstring_lead(path)}\n\n{output}\n"
        )
        if script == "gpu.py":
            sections.extend(elsewhere.values())
    header = previous_header(output_path) if args.only else None
    header = header or (
        "# Benchmarks\n\n"
        f"Measured by `make bench` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}. "
        "The machine may be shared: every script compares against a baseline timed in the same "
        "run, alternating between them, and reports ratios of medians.\n"
    )
    output_path.write_text(header + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"wrote {args.output}")
    if output_path.resolve() == headline.BENCHMARKS:
        # the README's and the site's headline tables, from what was just measured
        return headline.main(["--write"])
    return 0


def previous_header(path: Path) -> str | None:
    """The header of an existing report: under --only it still names the run that measured the
    sections left as they were (the rerun ones say when and on what beside their time)."""
    text = path.read_text(encoding="utf-8")
    return text.split("\n## ", 1)[0].rstrip() + "\n" if "\n## " in text else None


def _sections(text: str) -> dict[str, str]:
    """``{title: section text}`` of an existing report."""
    found = {}
    for chunk in text.split("\n## ")[1:]:
        title = chunk.split("\n", 1)[0]
        found[title] = f"## {chunk.rstrip()}\n"
    return found


if __name__ == "__main__":
    sys.exit(main())
