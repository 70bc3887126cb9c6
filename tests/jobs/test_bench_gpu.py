"""bench/gpu.py runs anywhere: `--quick` on this CPU is a smoke test of the script (every loop
at both sizes, the host-read count, the rows file), not of its figures."""

import importlib.util
import json
import os
import subprocess
import sys

from conftest import ROOT


def test_the_gpu_benchmark_runs_quickly_and_writes_its_rows(tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    command = [
        sys.executable, "bench/gpu.py", "--quick", "--out", str(rows_file),
        "--data-root", str(tmp_path / "data"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert not [r for r in rows if r["kind"] == "error"], result.stdout
    loops = {"qg", "qg-padded", "hand", "pyg", "qg-list", "hand-own"}
    if importlib.util.find_spec("lightning") is not None:  # a bench extra
        loops |= {"lightning", "lightning-work"}
    for size in ("small", "large"):
        measured = {
            r["loop"]
            for r in rows
            if r["kind"] == "cell" and r["size"] == size and (r.get("graphs_per_s") or 0) > 0
        }
        assert loops <= measured, (size, measured, result.stdout)
    # qg's steady step reads nothing on the host, as the benchmark counts it too
    assert "host reads per training step, `qg.Trainer`, small, data on the device: 0 (" in (
        result.stdout
    )
    assert "| target | wanted | measured | verdict |" in result.stdout
