"""``ddp``: the default strategy."""

from __future__ import annotations

from .base import Strategy


class DDPStrategy(Strategy):
    """Every rank holds the whole model, its gradients and its optimizer state; DDP averages the
    gradients during the backward pass (through gloo's or NCCL's all-reduce, or the shared-memory
    exchange on one CPU machine).
    """

    name = "ddp"
