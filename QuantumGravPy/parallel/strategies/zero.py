"""``zero``: DDP with the optimizer state split over the ranks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ...config import Config
from .. import distributed
from .base import alone_notice
from .ddp import DDPStrategy


class ZeroStrategy(DDPStrategy):
    """As ddp, but each rank keeps the optimizer state of a 1/W share of the parameters only
    (``ZeroRedundancyOptimizer``, whole parameters split by size): after its step, each rank
    broadcasts its share. In one process there is nothing to share: it trains as ddp does,
    with a warning.
    """

    name = "zero"

    @classmethod
    def notices(cls, config: Config, processes: int) -> list[str]:
        return [alone_notice(cls.name)] if processes == 1 else []

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer  # its import takes 0.5 s

        return ZeroRedundancyOptimizer(list(params), optimizer_class=cls, **kwargs)

    def optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        # Every rank sends its share to rank 0, whose state_dict is then the plain optimizer's:
        # parameters numbered in the model's order, so a ddp run (or one process) loads it,
        # and load_state_dict of such a dict keeps each rank's share.
        optimizer.consolidate_state_dict(to=0)
        return optimizer.state_dict() if distributed.is_main() else None
