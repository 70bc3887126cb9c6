"""Settings of different sections that exclude each other (each section's own are its
``validate`` method's)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def check_padding(config: Any) -> None:
    """``training.pad_batches``: node-budget batches of the built-in model, whose graphs do not
    see each other, whose edges the budget bounds (see ``data.padding``)."""
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
    if against is not None:
        raise ConfigError(f"training.pad_batches: {against}")
