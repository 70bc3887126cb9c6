"""Run every benchmark and write BENCHMARKS.md: the machine, the date, and each script's tables.

    python bench/report.py [--output BENCHMARKS.md] [--only SCRIPT ...] [--smoke]

`make bench` runs this, then `bench/headline.py` (the README's and the site's headline tables,
from the new BENCHMARKS.md). Each script runs in its own process, one after the other, so they
do not compete for the cores; their own output (markdown tables, with the targets they check) is
copied under a heading that says what they compare. `--smoke` runs each on tiny inputs instead
(`make bench-smoke`, in CI), so that none stops working unseen between full runs.

The physics studies (studies/) have their own runner, studies/run.py, which writes STUDIES.md
with the functions here.
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
    ("step.py", "A training step on a CPU, as a stand-in for a launch-bound GPU step"),
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
    ("counts.py", "Counts: a regression against a Poisson and a softplus head on interval sizes"),
    (
        "generative.py",
        "A generative model of causal sets: trained, sampled, compared with its data",
    ),
    ("data_files.py", "Your data on disk: preprocessing Zarr files, disk storage, memory"),
    ("predict.py", "Predicting on a large HDF5 file: qg predict's time and memory"),
    ("handover.py", "After preparation: the ranks' graphs handed to the parent as data"),
    ("scale.py", "The field's size: 1,024-2,048-element causal sets, prepared and trained"),
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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="run every script on tiny inputs (--smoke) to check that each still runs to its "
        "end; writes no report",
    )
    args = parser.parse_args()
    if args.smoke:
        return smoke(SCRIPTS, ROOT / "bench")
    output_path = Path(args.output)
    write_report(SCRIPTS, ROOT / "bench", output_path, args.only, "Benchmarks", "make bench",
                 keep=MEASURED_ELSEWHERE)  # fmt: skip
    if output_path.resolve() == headline.BENCHMARKS:
        # the README's and the site's headline tables, from what was just measured
        return headline.main(["--write"])
    return 0


def _env() -> dict[str, str]:
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )


def smoke(scripts: tuple[tuple[str, str], ...], folder: Path) -> int:
    """Run each script with ``--smoke`` (tiny inputs, seconds each); 1 if any fails."""
    failed = []
    for script, _ in scripts:
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(folder / script), "--smoke"],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        seconds = time.perf_counter() - start
        status = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"{folder.name}/{script} --smoke: {status} in {seconds:.0f} s", flush=True)
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-4000:], sep="\n", flush=True)
            failed.append(script)
    if failed:
        print(f"{len(failed)} of {len(scripts)} failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def write_report(
    scripts: tuple[tuple[str, str], ...],
    folder: Path,
    output_path: Path,
    only: list[str] | None,
    name: str,
    command: str,
    keep: str | None = None,
    note: str = "The machine may be shared: every script compares against a baseline timed in "
    "the same run, alternating between them, and reports ratios of medians.",
) -> None:
    """Run ``scripts`` of ``folder`` one after the other and write their sections, under a
    header naming the machine, to ``output_path``. ``only``: run these, keep the rest's
    sections; sections whose title starts with ``keep`` (figures from another machine) stay."""
    existing = _sections(output_path.read_text(encoding="utf-8")) if output_path.exists() else {}
    previous = existing if only else {}
    elsewhere = {t: text for t, text in existing.items() if keep and t.startswith(keep)}
    sections = []
    for script, title in scripts:
        if only and script not in only and title in previous:
            sections.append(previous[title])
            if script == "gpu.py":
                sections.extend(elsewhere.values())
            continue
        path = folder / script
        shown = f"{folder.name}/{script}"
        print(f"running {shown} ...", flush=True)
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, env=_env(), cwd=ROOT
        )
        minutes = (time.perf_counter() - start) / 60
        print(f"{shown}: {minutes:.1f} min, exit {result.returncode}", flush=True)
        output = result.stdout.strip()
        if result.returncode != 0:
            output += (
                f"\n\n**failed** (exit {result.returncode}):\n\n```\n{result.stderr[-3000:]}\n```"
            )
        elif "|---" not in output:
            output = f"```\n{output}\n```"
        when = f"{minutes:.1f} min"
        if only:  # the header names the run the other sections are from
            when += f"; rerun {datetime.now(timezone.utc):%Y-%m-%d} on {cpu_name()}"
        sections.append(
            f"## {title}\n\n`python {shown}` ({when}). {docstring_lead(path)}\n\n{output}\n"
        )
        if script == "gpu.py":
            sections.extend(elsewhere.values())
    header = previous_header(output_path) if only else None
    header = header or (
        f"# {name}\n\n"
        f"Measured by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}. {note}\n"
    )
    output_path.write_text(header + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"wrote {output_path}")


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
