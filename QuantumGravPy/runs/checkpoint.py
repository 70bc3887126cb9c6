"""Checkpoint files: atomic writes and safe, checked reads.

A checkpoint is a dict of tensors and plain containers (never arbitrary pickled objects), so it
loads with ``torch.load(weights_only=True)`` and loading one never runs code. Its weights are
the bare model's (no wrapper's prefix), and it says so (``model_prefix``), so that a model
whose own attribute is called ``module`` loads back as it was written. Every member of the zip
archive is checked against the CRC-32 it was written with before anything is used: torch's
reader does not check them, and a bit flipped on disk would otherwise be trained on.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, DiskFullError, cause, disk_full

# 2: the full state needed to resume (random states, scaler, EMA, best weights, config digest)
FORMAT_VERSION = 2
# Wrappers that prefix parameter names: DistributedDataParallel and torch.compile. Removed only
# where a state dict fits the model only without them (:func:`fitted`).
_PREFIXES = ("module.", "_orig_mod.")
# What the weights of a checkpoint written here are prefixed with: nothing (the bare model's).
PREFIX_KEY = "model_prefix"


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically: a crash leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, PREFIX_KEY: "", **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch's writer may wrap the OSError
        if disk_full(e):  # the file as it was stays whole: the new one never replaced it
            raise DiskFullError(f"no space left on the device writing {path}") from e
        raise
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def checkpoint_epoch(path: Path) -> int | None:
    """The epoch a checkpoint of ours holds, read without loading its tensors; None if there
    is no such file or it cannot be read."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["epoch"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, pickle.UnpicklingError):
        return None  # no file, or not one of ours: nothing to name


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint; its weights come back named as written (bare, in every
    checkpoint of ours: ``model_prefix`` says so)."""
    path = Path(path)
    if path.is_dir():
        inside = [p for p in (path / "checkpoints" / "best.pt", path / "best.pt") if p.is_file()]
        hint = f"; did you mean {inside[0]}?" if inside else ""
        raise CheckpointError(f"{path} is a directory, not a checkpoint file{hint}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    with open(path, "rb") as f:
        start = f.read(64)
    if not start.startswith(b"PK"):  # torch.save writes zip archives
        raise CheckpointError(f"{path}: not a checkpoint ({_what_it_is(start)})")
    verify_archive(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f" such as {found.group(1)}" if found else ""
        raise CheckpointError(
            f"{path}: refused, it holds Python objects{what} besides tensors and plain "
            "containers, and loading those can run code; QuantumGravPy reads only the plain "
            "checkpoints it writes"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({cause(e)})") from e
    problem = _odd_contents(state)
    if problem:
        raise CheckpointError(f"{path}: not a QuantumGravPy checkpoint ({problem})")
    return state  # names as written: :func:`fitted` matches them to the model


class CorruptCheckpoint(CheckpointError):
    """A checkpoint whose bytes changed after it was written."""


def verify_archive(path: Path) -> None:
    """Refuse a zip archive (what ``torch.save`` writes) any member of which no longer matches
    the CRC-32 it was written with, naming it; torch's reader never checks them."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({cause(e)})") from e
    if bad is not None:
        raise CorruptCheckpoint(
            f"{path}: corrupt: its part {bad} no longer matches the checksum it was written "
            "with (the file changed on disk after it was saved), so it is not used; start "
            "from another checkpoint: the run's checkpoints/best.pt, or an earlier copy"
        )


def _odd_contents(state: Any) -> str | None:
    """What makes ``state`` no checkpoint of ours, in words; None if nothing does."""
    if not isinstance(state, dict) or "epoch" not in state:
        return "needs 'model' and 'epoch'"
    expected = {
        "model": (dict,),
        "epoch": (int,),
        "best_model": (dict, type(None)),
        "ema": (dict, type(None)),
        "model_spec": (dict, type(None)),
        "config": (dict, type(None)),
        PREFIX_KEY: (str,),
    }
    if "model" not in state:
        return "needs 'model' and 'epoch'"
    for key, types in expected.items():
        if key in state and not isinstance(state[key], types):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"its {key!r} is a {type(state[key]).__name__} (expected {wanted})"
    if isinstance(state.get("ema"), dict) and not isinstance(state["ema"].get("model"), dict):
        return "its 'ema' holds no 'model' weights"
    return None


def fitted(weights: Mapping[str, Any], own: Iterable[str]) -> dict[str, Any]:
    """``weights`` named as the model with tensor names ``own`` names its tensors: as they are,
    without wrappers' prefixes (a state dict saved from a DDP or compiled model), or with the
    model's own prefix (the bare module's weights for :class:`~QuantumGravPy.models.
    TensorInputs`, whose tensors start with ``module.``), whichever fits the most tensors; as
    they are on a tie."""
    own = set(own)
    candidates = [dict(weights), strip_prefixes(dict(weights))]
    first = {name.split(".", 1)[0] for name in own}
    if len(first) == 1 and all("." in name for name in own):  # the model's one outer attribute
        outer = first.pop()
        candidates.append({f"{outer}.{k}": v for k, v in weights.items()})
    return max(candidates, key=lambda c: len(own & c.keys()))


def evaluation_weights(state: dict[str, Any]) -> dict[str, Any]:
    """The weights a checkpoint is evaluated with: the moving average if it has one."""
    ema = state.get("ema")
    return ema["model"] if isinstance(ema, dict) else state["model"]


def strip_prefixes(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` without the ``module.``/``_orig_mod.`` prefixes wrappers give names."""
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


def _what_it_is(start: bytes) -> str:
    """What a file that is no zip archive seems to be, from its first bytes."""
    if not start:
        return "the file is empty"
    try:
        text = start.decode("utf-8")
    except UnicodeDecodeError:
        return "a PyTorch checkpoint is a zip archive, and this file is not one"
    first = text.strip().splitlines()[0][:40] if text.strip() else ""
    return f"it is a text file, starting {first!r}; a checkpoint is what training writes to " + (
        "RUN_DIR/checkpoints/*.pt"
    )


def load_model_state(
    model: torch.nn.Module,
    weights: dict[str, Any],
    path: str | Path,
    *,
    trained: Mapping[str, Any] | None = None,
    configured: Mapping[str, Any] | None = None,
    load: Callable[[torch.nn.Module, dict[str, Any]], Any] | None = None,
) -> None:
    """Load ``weights`` into ``model``; a mismatch is a :class:`CheckpointError` naming ``path``.

    The message names the ``model`` keys in which ``trained`` (the checkpoint's config, as a
    dict) and ``configured`` (the config now) differ, when both are given, and the first
    tensors that do not fit. ``load(model, weights)``: how (a sharded model's strategy's);
    by default ``model.load_state_dict``.
    """
    weights = fitted(weights, model.state_dict())
    try:
        (load or torch.nn.Module.load_state_dict)(model, weights)
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(
            f"{path}: does not fit the configured model: "
            + "; ".join([*model_changes(trained, configured), tensor_mismatch(model, weights)])
        ) from e


def model_changes(
    trained: Mapping[str, Any] | None, configured: Mapping[str, Any] | None
) -> list[str]:
    """In words, the ``model`` keys whose values in ``configured`` differ from ``trained``'s
    (both configs as dicts); empty when they agree or one is missing."""
    if not isinstance(trained, Mapping) or not isinstance(configured, Mapping):
        return []
    before, now = trained.get("model") or {}, configured.get("model") or {}
    changed = [
        f"model.{key} {before.get(key)!r} (the config says {now.get(key)!r})"
        for key in sorted(before)  # a key added since the checkpoint was written is no change
        if key in now and before[key] != now[key]
    ]
    return [f"it was trained with {', '.join(changed)}"] if changed else []


def tensor_mismatch(model: torch.nn.Module, weights: Mapping[str, Any]) -> str:
    """The first differences between a model's tensors and a state dict's, in words."""
    own = model.state_dict()
    shapes = [
        f"{k} {list(weights[k].shape)} in the checkpoint, {list(own[k].shape)} in the model"
        for k in own
        if k in weights and hasattr(weights[k], "shape") and weights[k].shape != own[k].shape
    ]
    missing = [k for k in own if k not in weights]
    extra = [k for k in weights if k not in own]
    parts = []
    if shapes:
        more = f" (and {len(shapes) - 2} more)" if len(shapes) > 2 else ""
        parts.append("tensor " + ", ".join(shapes[:2]) + more)
    for words, keys in (("the checkpoint lacks", missing), ("the model lacks", extra)):
        if keys:
            more = f" (and {len(keys) - 2} more)" if len(keys) > 2 else ""
            parts.append(f"{words} {', '.join(keys[:2])}{more}")
    return "; ".join(parts) or "the tensors differ"
