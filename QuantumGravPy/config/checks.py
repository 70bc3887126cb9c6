"""Checks of settings: the field metadata that checks one value (:func:`value_check`), and
settings of different sections that exclude each other (each section's own are its
``validate`` method's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from .schema import Config


def value_check(predicate: Callable[[Any], bool], expected: str) -> dict:
    """A field's metadata: ``predicate`` holds for every valid value; ``expected`` says what
    that is in the error of one that is not."""
    return {"check": predicate, "expected": expected}


POSITIVE = value_check(lambda v: v > 0, "a positive number")
NON_NEGATIVE = value_check(lambda v: v >= 0, "a number >= 0")
PROBABILITY = value_check(lambda v: 0 <= v < 1, "a number in [0, 1)")


def check_padding(config: Config) -> None:
    """``training.pad_batches``: node-budget batches of the built-in model, whose graphs do not
    see each other, whose edges the budget bounds (see ``data.batches.padding``)."""
    if not config.training.pad_batches:
        return
    against = None
    if config.training.batch_nodes is None:
        against = "needs training.batch_nodes, the budget of nodes"
    elif config.model.type is not None:
        against = f"not with model.type {config.model.type} (its graphs might see the padding)"
    elif config.model.norm == "batch":
        against = "not with model.norm: batch, whose statistics would count the padding nodes"
    elif config.training.precision == "16":
        against = 'not with training.precision: "16", whose range the padding rows might leave'
    elif config.augmentation.preset is not None:
        against = "not with augmentation.preset, which can add links past the edge budget"
    elif any(t.level == "edge" for t in config.tasks):
        against = "not with an edge-level task, whose pairs the padding does not budget"
    if against is not None:
        raise ConfigError(f"training.pad_batches: {against}")
