"""An exponential moving average of a model's weights, for validation and testing.

The average is a plain copy of the model, never wrapped in DDP (``parallel.strategy: fsdp``
shards it as it shards the model, and each rank averages its own shards). It is updated from
the trained weights after every optimizer step; under DDP those weights are the same on every
rank after the step, so every rank's average is the same too, without any communication.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class EMA:
    """``ema = EMA(model, decay)``; ``ema.update(model)`` after each step; ``ema.module``.

    After an update, each floating-point parameter is ``decay * average + (1 - decay) * weight``.
    Buffers (such as normalisation statistics) are copied, not averaged.
    """

    def __init__(self, model: nn.Module, decay: float):
        if not 0 < decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)
        self.updates = 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for mine, theirs in zip(self.module.parameters(), model.parameters(), strict=True):
            mine.lerp_(theirs.detach(), 1.0 - self.decay)
        for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)
        self.updates += 1

    def state_dict(self, model: dict[str, Any] | None = None) -> dict[str, Any]:
        """``model``: the average's weights as a plain state dict, if the module's own are
        not (a sharded average's, gathered)."""
        weights = self.module.state_dict() if model is None else model
        return {"decay": self.decay, "updates": self.updates, "model": weights}

    def load_state_dict(
        self, state: dict[str, Any], load: Callable[[nn.Module, dict], None] | None = None
    ) -> None:
        """``load(module, weights)``: how plain weights go into a sharded average."""
        (load or nn.Module.load_state_dict)(self.module, state["model"])
        self.updates = int(state["updates"])
