"""How a run holds the model on its ranks (``parallel.strategy``): one class per strategy.

- ``ddp`` (:mod:`.ddp`): the whole model and optimizer on every rank; DDP averages gradients.
- ``zero`` (:mod:`.zero`): as ddp, with the optimizer state split over the ranks.
- ``fsdp`` (:mod:`.fsdp`): parameters, gradients and optimizer state split (FSDP2).
- ``invariant`` (:mod:`.invariant`): the same bits on any number of processes.

What each is asked is :class:`~.base.Strategy`'s. A new strategy is a new module here: every
module of this package is imported, and each subclass with a ``name`` registers itself.
"""

from ...registry import import_all
from .base import (
    STRATEGIES,
    ExchangeTimer,
    Strategy,
    reference_markdown,
    strategy_class,
)

import_all(__name__, __path__)

__all__ = [
    "STRATEGIES",
    "ExchangeTimer",
    "Strategy",
    "reference_markdown",
    "strategy_class",
]
