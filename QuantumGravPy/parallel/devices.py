"""Where a process computes, and in which precision."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from . import distributed

# training.precision: (autocast dtype, dtype of weights and data)
PRECISIONS = {
    "32": (None, torch.float32),
    "bf16": (torch.bfloat16, torch.float32),
    "16": (torch.float16, torch.float32),
    "64": (None, torch.float64),
}


@dataclass(frozen=True)
class Placement:
    """Where a process computes, and in which precision (``training.precision``): its
    ``device``, the dtype of its weights and data, and the dtype it autocasts to (None: it
    does not). Training and prediction hold one each."""

    device: torch.device
    float_dtype: torch.dtype = torch.float32
    autocast_dtype: torch.dtype | None = None

    @classmethod
    def of(cls, device: torch.device, precision: str) -> Placement:
        autocast_dtype, float_dtype = PRECISIONS[precision]
        return cls(device, float_dtype, autocast_dtype)

    def autocast(self) -> torch.autocast:
        """The precision's autocast context on the device (off for 32 and 64)."""
        return autocast(self.device, self.autocast_dtype)


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


@contextlib.contextmanager
def fp32_matmul(device: torch.device, *, tf32: bool) -> Iterator[None]:
    """float32 matrix products on ``device`` in TF32 (``training.tf32``) while the run lasts;
    torch's setting, which is the whole process's, as it was afterwards. Nothing on a CPU."""
    if device.type != "cuda":
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def process_settings(device: torch.device, *, one_thread: bool, tf32: bool) -> contextlib.ExitStack:
    """What a run sets for its whole process, as it was again when the stack is closed: one
    CPU thread (``one_thread``: a run whose bits must not depend on the number of processes,
    see :func:`~QuantumGravPy.parallel.distributed.one_thread`) and TF32 (:func:`fp32_matmul`)."""
    stack = contextlib.ExitStack()
    if one_thread:
        stack.enter_context(distributed.one_thread(device))
    stack.enter_context(fp32_matmul(device, tf32=tf32))
    return stack
