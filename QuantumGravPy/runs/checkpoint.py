"""Checkpoint files: atomic writes and safe, checked reads.

A checkpoint is a dict of tensors and plain containers (never arbitrary pickled objects), so it
loads with ``torch.load(weights_only=True)`` and loading one never runs code.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError

# 2: the full state needed to resume (random states, scaler, EMA, best weights, config digest)
FORMAT_VERSION = 2
# Wrappers that prefix parameter names: DistributedDataParallel and torch.compile.
_PREFIXES = ("module.", "_orig_mod.")


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically: a crash leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint; ``model`` comes back as a plain state dict without prefixes."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: refused, not a plain checkpoint ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({first})") from None
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("model"), dict)
        or "epoch" not in state
    ):
        raise CheckpointError(f"{path}: not a QuantumGravPy checkpoint (needs 'model' and 'epoch')")
    state["model"] = strip_prefixes(state["model"])
    if isinstance(state.get("best_model"), dict):
        state["best_model"] = strip_prefixes(state["best_model"])
    if isinstance(state.get("ema"), dict) and isinstance(state["ema"].get("model"), dict):
        state["ema"]["model"] = strip_prefixes(state["ema"]["model"])
    return state


def evaluation_weights(state: dict[str, Any]) -> dict[str, Any]:
    """The weights a checkpoint is evaluated with: the moving average if it has one."""
    ema = state.get("ema")
    return ema["model"] if isinstance(ema, dict) else state["model"]


def strip_prefixes(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Remove ``module.``/``_orig_mod.`` prefixes so any checkpoint loads into a bare model."""
    result = {}
    for key, value in state_dict.items():
        changed = True
        while changed:
            changed = False
            for prefix in _PREFIXES:
                if key.startswith(prefix):
                    key = key[len(prefix) :]
                    changed = True
        result[key] = value
    return result


def load_model_state(model: torch.nn.Module, weights: dict[str, Any], path: str | Path) -> None:
    """Load ``weights`` into ``model``; a mismatch is a :class:`CheckpointError` naming ``path``."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: does not fit the configured model ({first})") from None
