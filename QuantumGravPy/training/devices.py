"""Where a process computes, and in which precision."""

from __future__ import annotations

import torch

from ..errors import ConfigError

# training.precision: (autocast dtype, dtype of weights and data)
PRECISIONS = {
    "32": (None, torch.float32),
    "bf16": (torch.bfloat16, torch.float32),
    "16": (torch.float16, torch.float32),
    "64": (None, torch.float64),
}


def autocast(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    """Autocast to ``dtype`` (bfloat16 or float16) on ``device``; None: off."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def select_device(spec: str) -> torch.device:
    """``training.device`` of a single process: auto, cpu, cuda or cuda:N, checked."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"training.device: {spec!r} requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"training.device: {spec!r} requested but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible"
            )
    return device
