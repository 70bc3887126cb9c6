"""Predicting on a large HDF5 file: time and peak memory of ``qg predict``.

python bench/predict.py [--sets 100000] [--points 24]

A stacked HDF5 file (QuantumGrav.jl's stacked layout: matrices (S, n, n) in Julia's
column-major orientation, zero-padded, with `cset_size` and the labels `y`) of 2D, 3D and
4D sprinklings of 12 to `--points` elements (2,000 distinct sets, repeated to `--sets`) is
predicted by a small model trained for two epochs on the embedded data. ``qg predict`` runs as a
user runs it, in a fresh process (reading the file into the disk cache included); its peak
resident memory is reported (VmHWM, imports included) against the bound disk training is held
to (`bench/data_files.py`: under 1.5 GB), with the time, and every row checked.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import smoke

import QuantumGravPy as qg
from QuantumGravPy.config import IMPLICIT_TASK, config_from_dict
from QuantumGravPy.data import generate_causal_set_graphs
from QuantumGravPy.physics import causal_structure
from QuantumGravPy.predict import read

RSS_TARGET_GB = 1.5  # disk training's bound (bench/data_files.py)
DISTINCT = 2000


def write_stacked(path: Path, count: int, points: int) -> np.ndarray:
    """``count`` causal sets (``DISTINCT`` sprinklings, repeated); returns their labels."""
    graphs = generate_causal_set_graphs(
        0, DISTINCT, num_points=(12, points), dimensions=(2, 3, 4), seed=9, progress=False
    )
    padded = np.zeros((DISTINCT, points, points), dtype=np.uint8)
    for i, g in enumerate(graphs):
        r = causal_structure(g.pos[None])[0][0].numpy().astype(np.uint8)
        padded[i, : len(r), : len(r)] = r.T  # Julia's orientation
    sizes = np.array([g.num_nodes for g in graphs])
    labels = np.array([int(g.y) for g in graphs])
    which = np.arange(count) % DISTINCT
    with h5py.File(path, "w") as f:
        adj = f.create_dataset(
            "adj", shape=(count, points, points), dtype="uint8", chunks=(256, points, points)
        )
        for first in range(0, count, 8192):
            adj[first : first + 8192] = padded[which[first : first + 8192]]
        f.create_dataset("cset_size", data=sizes[which])
        f.create_dataset("y", data=labels[which])
    return labels[which]


def train(tmp: Path) -> Path:
    cfg = config_from_dict(
        {
            "name": "predict-bench",
            "log_level": "WARNING",
            "data": {"root": str(tmp / "data"), "num_graphs": 600, "num_points": [12, 24]},
            "model": {"hidden_channels": 32, "num_layers": 2, "head_channels": [32]},
            "training": {"path": str(tmp / "run"), "device": "cpu", "num_epochs": 2},
            "testing": {"batch_size": 256},
        }
    )
    trainer = qg.Trainer(cfg)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    return cfg.run_dir


def _predict(args: list[str], queue) -> None:
    from QuantumGravPy.cli import main

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its summary line is not the report's
        code = main(args)
    seconds = time.perf_counter() - start
    # VmHWM, not ru_maxrss: the latter starts from the parent's size at the fork before exec
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    queue.put((code, int(fields["VmHWM"].split()[0]) * 1024, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=100_000)
    parser.add_argument("--points", type=int, default=24)
    args = smoke.parse(parser, sets=2000)
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="qg-bench-predict-"))
    try:
        store = tmp / "sets.h5"
        start = time.perf_counter()
        labels = write_stacked(store, args.sets, args.points)
        written = time.perf_counter() - start
        run_dir = train(tmp)
        output = tmp / "predictions.npz"
        command = [
            "predict", str(run_dir), "--files", str(store), "data.targets={y: y}",
            f"data.root={tmp / 'cache'}", "--output", str(output),
        ]  # fmt: skip
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        process = context.Process(target=_predict, args=(command, queue))
        process.start()
        code, peak, seconds = queue.get(timeout=3600)
        process.join()
        assert code == 0, f"qg predict exited with {code}"
        result = read(output)
        assert len(result) == args.sets
        assert result.graphs["index"].tolist() == list(range(args.sets))
        assert np.array_equal(result.graphs[f"{IMPLICIT_TASK}_true"], labels)
        accuracy = float((result.graphs[f"{IMPLICIT_TASK}_class"] == labels).mean())
        file_mb = store.stat().st_size / 1e6
        print(f"### qg predict on {args.sets:,} causal sets in one HDF5 file ({file_mb:.0f} MB)\n")
        print("| causal sets | elements | file written | qg predict (read, cached, predicted) "
              "| graphs/s | accuracy | peak RSS |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        print(
            f"| {args.sets:,} | 12-{args.points} | {written:.0f} s | {seconds:.0f} s "
            f"| {args.sets / seconds:,.0f} | {accuracy:.3f} | {peak / 1e9:.2f} GB |"
        )
        met = "met" if peak / 1e9 < RSS_TARGET_GB else "MISSED"
        print(f"\ntarget: peak under {RSS_TARGET_GB} GB (disk training's bound): {met}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
