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
        self._updates = 0
        self._taken: torch.Tensor | None = None  # steps taken since last counted, on the device

    @torch.no_grad()
    def update(self, model: nn.Module, taken: bool | torch.Tensor = True) -> None:
        """After an optimizer step; ``taken``: a flag on the device saying whether the step
        was taken (a step left out moves nothing, without the flag being read)."""
        if isinstance(taken, torch.Tensor):
            weights: dict[torch.dtype, torch.Tensor] = {}  # 1 - decay or 0, in each dtype
            for mine, theirs in zip(self.module.parameters(), model.parameters(), strict=True):
                weight = weights.get(mine.dtype)
                if weight is None:
                    weight = weights[mine.dtype] = taken.to(mine.dtype) * (1.0 - self.decay)
                mine.lerp_(theirs.detach(), weight)
            for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
                mine.copy_(torch.where(taken, theirs, mine))
            count = taken.long()
            self._taken = count if self._taken is None else self._taken + count
            return
        for mine, theirs in zip(self.module.parameters(), model.parameters(), strict=True):
            mine.lerp_(theirs.detach(), 1.0 - self.decay)
        for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
            mine.copy_(theirs)
        self._updates += 1

    @property
    def updates(self) -> int:
        """Updates made so far (a read of the device when steps were counted there)."""
        if self._taken is not None:
            self._updates += int(self._taken)
            self._taken = None
        return self._updates

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
        self._updates, self._taken = int(state["updates"]), None
