"""The kinds of embedded dataset (``data.kind``): which causal sets a graph is, and its labels.

One class per kind, one module each; every module of this package is imported, and each
subclass of :class:`~.base.DataKind` with a ``name`` registers itself, so that a new kind is a
new module (here, or in a module of your own named under ``extensions``). The config asks the
registry which names exist and what a kind needs; ``data/`` asks the kind for its causal sets.
Imports only the ground floor and, inside methods, the physics.
"""

from ..registry import import_all
from .base import DATA_KINDS, DataKind, data_kind, flat_sprinkling_labels, reference_markdown

import_all(__name__, __path__)

__all__ = ["DATA_KINDS", "DataKind", "data_kind", "flat_sprinkling_labels", "reference_markdown"]
