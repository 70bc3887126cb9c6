"""A run's starting weights (``model.init_from``): another run's, a checkpoint's, or a model's
state dict saved with ``torch.save``, loaded into a freshly built model before training.

Unlike ``--resume``, which continues a run (its optimizer, schedule, history and random
states), this starts a new run from trained weights alone: fine-tuning, a new head on a trained
body, or weights converted from another library.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError
from .checkpoint import CorruptCheckpoint, fitted, load_checkpoint, tensor_mismatch

KEY = "model.init_from"


def weights_file(source: str | Path) -> Path:
    """The file ``model.init_from`` names: a run directory's best checkpoint (its last if it
    has no best), or the file itself."""
    path = Path(source)
    if path.is_dir():
        for name in ("best.pt", "last.pt"):
            if (path / "checkpoints" / name).is_file():
                return path / "checkpoints" / name
        raise ConfigError(f"{KEY}: {path} is a directory without checkpoints/best.pt or last.pt")
    if not path.is_file():
        raise ConfigError(f"{KEY}: {path} does not exist (a run directory or a weights file)")
    return path


def starting_weights(source: str | Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """The file ``source`` names and the model weights it holds: a checkpoint's ``model``, or a
    plain state dict (tensors by name). Loaded without running code, as checkpoints are."""
    path = weights_file(source)
    try:
        return path, load_checkpoint(path)["model"]
    except CorruptCheckpoint:
        raise
    except CheckpointError as not_ours:
        try:
            plain = torch.load(path, map_location="cpu", weights_only=True)
        except (
            pickle.UnpicklingError,
            RuntimeError,
            EOFError,
            zipfile.BadZipFile,
            ValueError,
            OSError,
        ):
            raise not_ours from None  # why it is no checkpoint of ours is what to say
        if (
            isinstance(plain, Mapping)
            and plain
            and all(isinstance(v, torch.Tensor) for v in plain.values())
        ):
            return path, dict(plain)
        raise CheckpointError(
            f"{KEY}: {path} is neither a checkpoint of ours nor a state dict (tensors by name)"
        ) from None


def load_starting_weights(model: torch.nn.Module, source: str | Path, *, strict: bool) -> str:
    """Load the weights ``source`` names into ``model``; a line for the log saying what was
    loaded. ``strict``: every tensor of the model must be there, in its shape, and nothing
    else (a :class:`CheckpointError` naming the first that are not); otherwise the tensors that
    fit are loaded and the others left as built, and named."""
    path, weights = starting_weights(source)
    own = model.state_dict()
    weights = fitted(weights, own)  # a DDP model's saved names, or a TensorInputs module's
    fits = {k: v for k, v in weights.items() if k in own and v.shape == own[k].shape}
    mismatch = tensor_mismatch(model, weights)
    if len(fits) < len(own) or len(fits) < len(weights):
        if strict:
            raise CheckpointError(
                f"{KEY}: {path} does not fit the model: {mismatch}; set model.init_strict: "
                "false to start from the tensors that fit"
            )
        if not fits:
            raise CheckpointError(f"{KEY}: {path}: none of its tensors fits the model ({mismatch})")
    model.load_state_dict(fits, strict=False)
    left = len(own) - len(fits)
    rest = f"; {left} left as built ({mismatch})" if left else ""
    return f"{KEY}: {len(fits)} of the model's {len(own)} tensors from {path}{rest}"
