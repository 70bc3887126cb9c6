"""How a distributed run holds the model on its ranks (``parallel.strategy``).

A strategy is the one object the trainer asks about everything that depends on it: it builds
the optimizer, wraps the model for training, says how a micro-batch skips the gradient
exchange, and turns the optimizer's state into the plain state dict a checkpoint holds (and
back). The trainer keeps its loop and hooks; it never branches on the strategy's name.

- ``ddp``: every rank holds the whole model, its gradients and its optimizer state; DDP averages
  the gradients (through a communication hook: gloo's, or the shared-memory exchange).
- ``zero``: the same, but each rank keeps the optimizer state of its part of the parameters
  only (``ZeroRedundancyOptimizer``): after its step, each rank broadcasts its part.

Checkpoints hold what a one-process run would: the whole model's ``state_dict`` and the plain
optimizer's (parameters numbered in the model's order), gathered to rank 0, so any strategy and
any number of processes resumes any other's. Gradient clipping needs nothing of the strategy:
under both, every rank holds the whole averaged gradient.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import distributed

STRATEGIES = ("ddp", "zero")


class Strategy:
    """``ddp`` (and what one process does): the whole model and optimizer on every rank."""

    name = "ddp"

    def __init__(self, device: torch.device):
        self.device = device

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        return cls(params, **kwargs)

    def wrap(self, model: nn.Module, *, find_unused_parameters: bool, hook: Callable) -> nn.Module:
        """The module the training pass calls: ``model`` in DDP, averaging through ``hook``."""
        wrapped = DistributedDataParallel(
            model,  # already on self.device
            device_ids=distributed.ddp_device_ids(self.device),
            find_unused_parameters=find_unused_parameters,
        )
        wrapped.register_comm_hook(None, hook)
        return wrapped

    def no_sync(self, wrapped: nn.Module) -> contextlib.AbstractContextManager:
        """Around a micro-batch that does not step: its gradients are kept, not exchanged."""
        return wrapped.no_sync()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """The plain optimizer state dict on rank 0 (None on the others); every rank calls it."""
        return optimizer.state_dict() if distributed.is_main() else None


class ZeroStrategy(Strategy):
    """``zero``: DDP, with each rank holding the optimizer state of a 1/W share of the
    parameters (split by size, whole parameters each)."""

    name = "zero"

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer  # its import takes 0.5 s

        return ZeroRedundancyOptimizer(list(params), optimizer_class=cls, **kwargs)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        # Every rank sends its share to rank 0, whose state_dict is then the plain optimizer's:
        # parameters numbered in the model's order, so a ddp run (or one process) loads it,
        # and load_state_dict of such a dict keeps each rank's share.
        optimizer.consolidate_state_dict(to=0)
        return optimizer.state_dict() if distributed.is_main() else None


def make_strategy(name: str, device: torch.device) -> Strategy:
    """The strategy ``parallel.strategy`` names, for the processes of a distributed run."""
    return {"ddp": Strategy, "zero": ZeroStrategy}[name](device)
