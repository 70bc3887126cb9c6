"""Start-up: how long the package and the command line take to answer, against `import torch`.

python bench/startup.py [--repeats 5] [--smoke]

Each command runs in a fresh interpreter, as a user starts it, alternating with
`python -c "import torch"` (the baseline) so that both see the same machine; the tables give
medians over the repeats (after one warm-up round that fills the file cache) and their ratio.
Targets: `import QuantumGravPy` at most 1.5x `import torch`; `qg --help` and `qg <command>
--help` at most 1x; a mistake in a config key or an override value at most 2x. The other rows
say what a command that does work pays before it starts: a dotted path in the config (here a
misspelt class) must import the library it names, and training loads torch, torch_geometric and
torchmetrics.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import smoke

ROOT = Path(__file__).resolve().parent.parent


def qg_command() -> list[str]:
    """The ``qg`` program beside this interpreter (a virtual environment's), as users run it."""
    found = Path(sys.executable).with_name("qg")
    if found.exists():
        return [str(found)]
    found = shutil.which("qg")
    return [found] if found else [sys.executable, "-m", "QuantumGravPy"]


def timed(command: list[str], expect: int) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if result.returncode != expect:
        raise SystemExit(f"{' '.join(command)}: exit {result.returncode}\n{result.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = smoke.parse(parser, repeats=1)
    qg = qg_command()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp, "key.yaml")
        key.write_text("training:\n  num_epoch: 3\n")  # num_epochs misspelt
        good = Path(tmp, "good.yaml")
        good.write_text("training:\n  num_epochs: 3\n")
        path = Path(tmp, "path.yaml")
        path.write_text("model:\n  conv: torch_geometric.nn.GraphConvv\n")
        # (name, command, expected exit status, target ratio or None)
        rows = [
            ("`import QuantumGravPy`", [py, "-c", "import QuantumGravPy"], 0, 1.5),
            ("`qg --help`", [*qg, "--help"], 0, 1.0),
            ("`qg train --help`", [*qg, "train", "--help"], 0, 1.0),
            ("`qg train` with a misspelt config key", [*qg, "train", str(key)], 2, 2.0),
            (
                "`qg train` with a bad override value",
                [*qg, "train", str(good), "training.num_epochs=many"],
                2,
                2.0,
            ),
            ("`qg train` with a misspelt class path", [*qg, "train", str(path)], 2, None),
            (
                "the training code loaded (`qg.Trainer`)",
                [py, "-c", "import QuantumGravPy as qg; qg.Trainer"],
                0,
                None,
            ),
        ]
        baseline_command = [py, "-c", "import torch"]
        times: dict[str, list[float]] = {name: [] for name, *_ in rows}
        baseline: list[float] = []
        for round_ in range(args.repeats + 1):
            for name, command, expect, _ in rows:
                base = timed(baseline_command, 0)
                mine = timed(command, expect)
                if round_ > 0:  # the first round warms the file cache
                    baseline.append(base)
                    times[name].append(mine)
    torch_s = statistics.median(baseline)
    print(f'### Start-up against `python -c "import torch"` ({torch_s:.2f} s)\n')
    print(f"Medians of {args.repeats} fresh interpreters each, alternating with the baseline.\n")
    print("| command | seconds | / import torch | target |")
    print("|---|---|---|---|")
    verdicts = []
    for name, _, _, target in rows:
        seconds = statistics.median(times[name])
        ratio = seconds / torch_s
        if target is None:
            shown = "-"
        else:
            met = ratio <= target
            shown = f"at most {target:g}x: {'met' if met else '**missed**'}"
            verdicts.append(met)
        print(f"| {name} | {seconds:.2f} | {ratio:.2f}x | {shown} |")
    print(f"\ntargets: {'all met' if all(verdicts) else 'not all met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
