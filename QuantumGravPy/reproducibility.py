"""Reproducing runs: random states, the config check on resume, the world-size conditions, and
a record of the software and machine a run used.

A resumed run continues from the end of the last completed epoch. Everything an epoch draws is a
function of (seed, epoch) (the batch order, samplers, augmentation) or of the random states saved
with the checkpoint (dropout), so the epochs after a resume repeat exactly what an uninterrupted
run would have done.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import random
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from .config import Config, config_to_dict
from .errors import ConfigError

# Keys a resumed run may change: how long it runs, where its files go, and how it is spread over
# processes and devices. Anything else changes what is trained, and is refused without --force.
# training.batch_size and accumulate_grad_batches are compared through the batch per optimizer
# step (below), so a job restarted on fewer GPUs may keep its steps by raising either.
RESUMABLE_KEYS = (
    "name",
    "log_level",
    "data.root",
    "training.path",
    "training.num_epochs",
    "training.checkpoint_every",
    "training.num_workers",
    "training.device",
    "training.batch_size",
    "training.accumulate_grad_batches",
    "validation.batch_size",
    "testing.batch_size",
    "early_stopping.enabled",
    "early_stopping.patience",
    "early_stopping.grace_period",
    "parallel",
)


# --- random states -------------------------------------------------------------------------------


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


# --- the config check ----------------------------------------------------------------------------


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; keyword dicts are flattened too."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _resumable(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)


def trained_config(config: Config | Mapping[str, Any]) -> dict[str, Any]:
    """The flattened keys that decide what is trained (everything not in RESUMABLE_KEYS)."""
    tree = config if isinstance(config, Mapping) else config_to_dict(config)
    return {k: v for k, v in flatten(tree).items() if not _resumable(k)}


def config_digest(config: Config | Mapping[str, Any]) -> str:
    text = json.dumps(trained_config(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def step_batch(batch_size: int, world_size: int, accumulate: int) -> int:
    """Graphs per optimizer step: per-process batch x processes x accumulated batches."""
    return batch_size * world_size * accumulate


def check_resume(
    config: Config, state: Mapping[str, Any], world_size: int, *, force: bool, path: Any
) -> list[tuple[int, str]]:
    """Refuse a config that would train something else; return (level, notice)s for the log.

    Raises :class:`ConfigError` naming every differing key (and the batch per optimizer step, if
    it changed), unless ``force``; then the differences come back as notices instead.
    """
    saved = state["config"]
    t = config.training
    before = trained_config(saved)
    now = trained_config(config)
    changes = [
        f"{key}: {before.get(key, '(absent)')!r} -> {now.get(key, '(absent)')!r}"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    ]
    st = saved["training"]
    old_step = step_batch(st["batch_size"], state["world_size"], st["accumulate_grad_batches"])
    new_step = step_batch(t.batch_size, world_size, t.accumulate_grad_batches)
    if old_step != new_step:
        hint = ""
        if (old_step % (world_size * t.accumulate_grad_batches)) == 0:
            keep = old_step // (world_size * t.accumulate_grad_batches)
            hint = f"; training.batch_size={keep} keeps it"
        changes.append(
            f"graphs per optimizer step (training.batch_size x processes x "
            f"training.accumulate_grad_batches): {old_step} -> {new_step}{hint}"
        )
    if changes and not force:
        raise ConfigError(
            f"--resume: the config differs from the one {path} was trained with: "
            + "; ".join(changes)
            + ". Restore those keys, or pass --force to continue with the changes anyway"
        )
    notices = [(logging.WARNING, f"resuming with changed settings (--force): {c}") for c in changes]
    versions = version_changes(state.get("environment"))
    if versions:
        notices.append(
            (
                logging.WARNING,
                f"the checkpoint was written with other versions ({', '.join(versions)}): the "
                "continued run may differ from an uninterrupted one by rounding",
            )
        )
    if state["world_size"] != world_size:
        streams = "; dropout continues from new random streams" if config.model.dropout else ""
        notices.append(
            (
                logging.INFO,
                f"resuming a run trained with {state['world_size']} process(es) on "
                f"{world_size}: {new_step} graphs per optimizer step as before "
                f"({t.batch_size} per process x {world_size} x {t.accumulate_grad_batches} "
                "accumulated); the batch sequence is unchanged when the world-size conditions "
                f"hold{streams}",
            )
        )
    return notices


# --- the environment -----------------------------------------------------------------------------

# Versions that decide the numbers a run computes; a resume under other ones is flagged.
NUMERIC_PACKAGES = ("torch", "torch_geometric", "numpy")


def environment(device: torch.device | None = None, world_size: int = 1) -> dict[str, Any]:
    """The software and machine of this process: what a reader needs to reproduce a run."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    env: dict[str, Any] = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": list(sys.argv),
        "quantumgravpy": installed("QuantumGravPy"),
        "python": platform.python_version(),
        **{name: installed(name) for name in NUMERIC_PACKAGES},
        "platform": platform.platform(),
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
    return [
        f"{name} {saved.get(name)} -> {now[name]}"
        for name in NUMERIC_PACKAGES
        if saved.get(name) != now[name]
    ]


# --- world-size invariance -----------------------------------------------------------------------


def invariance_breaks(config: Config) -> list[str]:
    """Why results of ``config`` would depend on the number of processes (empty: they do not).

    With none of these, every world size that divides the batch per optimizer step sees the same
    sequence of global batches and computes the same gradients (up to rounding).
    """
    breaks = []
    if not config.training.drop_last:
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
