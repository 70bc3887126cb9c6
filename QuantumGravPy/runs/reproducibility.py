"""Reproducing runs: seeding and random states, the world-size conditions, and a record of the
software and machine a run used.

A resumed run continues from the end of the last completed epoch. Everything an epoch draws is a
function of (seed, epoch) (the batch order, samplers, augmentation) or of the random states saved
with the checkpoint (dropout), so the epochs after a resume repeat exactly what an uninterrupted
run would have done (:mod:`.resume` checks that a resumed config trains the same thing).
"""

from __future__ import annotations

import os
import platform
import random
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from ..config import Config
from ..config.dotted import CONFIG_FOLDERS

# --- random states -------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators (every CUDA device's too)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """This process's torch, numpy and Python random states, as tensors and plain numbers.

    Plain, so that a checkpoint holding them still loads with ``weights_only=True``.
    """
    _, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": version,
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Mapping[str, Any], device: torch.device | None = None) -> None:
    """Restore what :func:`rng_state` recorded."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"].tolist()), p["gauss_next"]))
    if device is not None and device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


# --- the environment -----------------------------------------------------------------------------

# Versions that decide the numbers a run computes; a resume under other ones is flagged.
NUMERIC_PACKAGES = ("torch", "torch_geometric", "numpy")
# Settings that move torch's, MKL's and oneDNN's CPU kernels onto other code paths, which round
# differently (docs/reproducibility.md: the test suite passes both ways).
KERNEL_SETTINGS = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_kernels() -> dict[str, Any]:
    """What decides the last bits of a CPU computation besides the versions: the instruction
    set torch's kernels use (``AVX512``, ``AVX2``, ``DEFAULT``: the processor's, unless
    ``ATEN_CPU_CAPABILITY`` lowers it), the settings that move MKL and oneDNN, and the threads."""
    return {
        "cpu": cpu_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_settings": {k: os.environ[k] for k in KERNEL_SETTINGS if k in os.environ},
        "threads": torch.get_num_threads(),
    }


def installed(name: str) -> str | None:
    """The installed version of the distribution ``name``; None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment(device: torch.device | None = None, world_size: int = 1) -> dict[str, Any]:
    """The software and machine of this process: what a reader needs to reproduce a run."""
    env: dict[str, Any] = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": list(sys.argv),
        # where its config files were: modules named in them beside them (qg predict finds
        # them there again)
        "config_folders": [str(f) for f in CONFIG_FOLDERS],
        "quantumgravpy": installed("QuantumGravPy"),
        "python": platform.python_version(),
        **{name: installed(name) for name in NUMERIC_PACKAGES},
        "platform": platform.platform(),
        **cpu_kernels(),
        "host": platform.node(),
        "world_size": world_size,
        "device": str(device) if device is not None else None,
        "cuda": torch.version.cuda,
    }
    if device is not None and device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def version_changes(saved: Mapping[str, Any] | None) -> list[str]:
    """Numeric packages whose version differs from the one a checkpoint was written with."""
    if not saved:
        return []
    now = environment()
    changed = [
        f"{name} {saved.get(name)} -> {now[name]}"
        for name in NUMERIC_PACKAGES
        if saved.get(name) != now[name]
    ]
    for name in ("cpu_capability", "kernel_settings"):  # recorded since 0.1 (older: unknown)
        if name in saved and saved[name] != now[name]:
            changed.append(f"{name} {saved[name]} -> {now[name]}")
    return changed


# --- world-size invariance -----------------------------------------------------------------------


def invariance_breaks(config: Config) -> list[str]:
    """Why results of ``config`` would depend on the number of processes (empty: they do not).

    With none of these, every world size that divides the batch per optimizer step sees the same
    sequence of global batches and computes the same gradients (up to rounding).
    """
    breaks = []
    if config.training.batch_nodes is not None:
        breaks.append(
            "training.batch_nodes is set (each process's budget of nodes makes the global batches)"
        )
    elif not config.training.drop_last:
        breaks.append(
            "training.drop_last is false (the last batch of an epoch depends on the number of "
            "processes, and DDP pads it with repeated graphs)"
        )
    if config.model.dropout > 0:
        breaks.append(f"model.dropout is {config.model.dropout} (each process draws its own masks)")
    if config.model.norm == "batch":
        breaks.append("model.norm is batch (BatchNorm statistics come from each process's batch)")
    if config.augmentation.preset is not None and config.augmentation.seeding == "per_rank":
        breaks.append("augmentation.seeding is per_rank (draws depend on rank and world size)")
    return breaks
