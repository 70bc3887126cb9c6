"""torch's internals: a DataLoader's persistent workers, and three private functions of torch
with no public equivalent that is as quick (written for torch 2.4-2.13).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import moved

DISTRIBUTION = "torch"


def stop_workers(loader: Any) -> None:
    """Stop a DataLoader's persistent worker processes now (torch keeps them in the loader's
    iterator, and stops them only from a finaliser); it starts new ones if used again."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    loader._iterator = None


def norms(tensors: list[Tensor]) -> list[Tensor]:
    """Each tensor's 2-norm, in one fused kernel launch (what clip_grad_norm_ calls)."""
    return torch._foreach_norm(tensors)


def assert_on_device(condition: Tensor, message: str) -> None:
    """Fail with ``message`` where ``condition`` is False, without waiting for the device: the
    check runs on it, and an accelerator reports it at its next synchronisation."""
    torch._assert_async(condition, message)


def scales_inside_step(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's step takes the gradient scaler's scale itself (fused Adam,
    AdamW, SGD): the flag torch's GradScaler reads."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def check() -> None:
    """Every internal above, on a real loader with a worker and a fused optimizer."""
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1, persistent_workers=True)
    list(loader)
    iterator = getattr(loader, "_iterator", None)
    if iterator is None or not hasattr(iterator, "_shutdown_workers"):
        raise moved(DISTRIBUTION, "a DataLoader keeps its persistent workers elsewhere")
    stop_workers(loader)
    if not callable(getattr(torch, "_foreach_norm", None)):
        raise moved(DISTRIBUTION, "torch._foreach_norm is gone")
    if [round(float(n), 6) for n in norms([torch.ones(4), torch.ones(9)])] != [2.0, 3.0]:
        raise moved(DISTRIBUTION, "torch._foreach_norm computes something else")
    if not callable(getattr(torch, "_assert_async", None)):
        raise moved(DISTRIBUTION, "torch._assert_async is gone")
    assert_on_device(torch.tensor(True), "not raised")
    weight = torch.nn.Parameter(torch.zeros(1))
    if not scales_inside_step(torch.optim.Adam([weight], fused=True)):
        raise moved(DISTRIBUTION, "fused Adam no longer says _step_supports_amp_scaling")
