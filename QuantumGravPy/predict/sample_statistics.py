"""What ``qg sample``'s report measures: each causal set's statistics, the size bins it groups
them in, the reference sets of each bin, and the exact expectations where they are known.

Per causal set: whether it is a valid order, its size, ordering fraction, Myrheim-Meyer
dimension, links and interval abundances per element, height (the longest chain) and width
(the largest antichain, exact). The exact values are those of sprinklings into a flat diamond
of the data's dimension at each set's own size (:mod:`QuantumGravPy.physics.exact`): the
ordering fraction and the Myrheim-Meyer dimension in any dimension, links and interval
abundances in two.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..physics import (
    interval_abundances,
    longest_chain,
    myrheim_meyer_dimension,
    order_violation,
    ordering_fraction,
    ordering_fraction_expectation,
    sprinkle,
)
from ..physics.exact import interval_abundance_expectation
from ..physics.observables import largest_antichain

MAX_INTERVAL = 4  # interval abundances reported: k = 0 (links) .. MAX_INTERVAL
LABELS = {
    "valid": "valid orders",
    "ordering_fraction": "ordering fraction",
    "myrheim_meyer_dimension": "Myrheim-Meyer dimension",
    "links_per_element": "links per element",
    **{f"intervals_{k}_per_element": f"intervals of {k} per element" for k in range(1, 5)},
    "height": "height (longest chain)",
    "width": "width (largest antichain)",
}
MOST_SIZES = 6  # up to this many sizes, each is a bin of its own
BINS = 4  # otherwise the training range is cut into this many bins of equal width
MIN_REFERENCE = 10  # a bin with fewer training sets is compared with sprinklings
MAX_SPRINKLINGS = 200  # sprinklings drawn for one bin, at most


def statistics(relations: Sequence[torch.Tensor]) -> dict[str, np.ndarray]:
    """Each statistic of the causal sets ``relations`` (``[n, n]`` bool each), and their
    sizes (``elements``)."""
    out: dict[str, list[float]] = {name: [] for name in ("elements", *LABELS)}
    for r in relations:
        r = r.bool()
        n = r.shape[-1]
        valid = order_violation(r) is None
        out["valid"].append(float(valid))
        out["elements"].append(float(n))
        fraction = float(ordering_fraction(r))
        out["ordering_fraction"].append(fraction)
        dimension = myrheim_meyer_dimension(fraction) if 0 < fraction < 1 else math.nan
        out["myrheim_meyer_dimension"].append(dimension)
        counts = interval_abundances(r, MAX_INTERVAL).double() / max(n, 1)
        out["links_per_element"].append(float(counts[0]))
        for k in range(1, MAX_INTERVAL + 1):
            out[f"intervals_{k}_per_element"].append(float(counts[k]))
        out["height"].append(float(longest_chain(r)) if valid else math.nan)
        out["width"].append(float(largest_antichain(r)) if valid else math.nan)
    return {name: np.asarray(values, dtype=np.float64) for name, values in out.items()}


def exact_values(sizes: np.ndarray, dimension: float | None) -> dict[str, np.ndarray]:
    """Each statistic's exact expectation for a sprinkling of each of ``sizes`` elements into
    a flat diamond of ``dimension`` (NaN where none is known, or the dimension is not)."""
    nan = np.full(len(sizes), math.nan)
    out = {name: nan.copy() for name in LABELS}
    out["valid"] = np.ones(len(sizes))
    if dimension is None:
        return out
    out["ordering_fraction"][:] = ordering_fraction_expectation(dimension)
    out["myrheim_meyer_dimension"][:] = dimension
    if dimension == 2:
        for i, n in enumerate(sizes.astype(int)):
            expected = interval_abundance_expectation(n, MAX_INTERVAL) / max(n, 1)
            out["links_per_element"][i] = expected[0]
            for k in range(1, MAX_INTERVAL + 1):
                out[f"intervals_{k}_per_element"][i] = expected[k]
    return out


@dataclass(frozen=True)
class SizeBin:
    """The sets of ``low`` to ``high`` elements; ``beyond``: outside the training sizes."""

    low: int
    high: int
    beyond: bool

    @property
    def name(self) -> str:
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"

    def holds(self, sizes: np.ndarray) -> np.ndarray:
        return (sizes >= self.low) & (sizes <= self.high)


def size_bins(sizes: np.ndarray, trained: tuple[int, int] | None) -> list[SizeBin]:
    """The bins of the samples' ``sizes``: each size its own, for up to :data:`MOST_SIZES` of
    them; otherwise :data:`BINS` of equal width over the ``trained`` range (the training data's
    smallest and largest), and as many over each side beyond it. Only bins with samples."""
    sizes = np.asarray(sizes, dtype=np.int64)
    lo, hi = trained if trained is not None else (int(sizes.min()), int(sizes.max()))
    inside = sizes[(sizes >= lo) & (sizes <= hi)]
    bins = []
    for part, beyond in ((sizes[sizes < lo], True), (inside, False), (sizes[sizes > hi], True)):
        if not len(part):
            continue
        if len(np.unique(sizes)) <= MOST_SIZES:
            bins += [SizeBin(int(n), int(n), beyond) for n in np.unique(part)]
            continue
        first, last = (lo, hi) if not beyond else (int(part.min()), int(part.max()))
        edges = np.linspace(first, last + 1, BINS + 1)
        for a, b in itertools.pairwise(edges):
            low, high = math.ceil(a), math.ceil(b) - 1
            if high >= low and ((part >= low) & (part <= high)).any():
                bins.append(SizeBin(low, high, beyond))
    return bins


def sprinklings(sizes: np.ndarray, dimension: int) -> list[torch.Tensor]:
    """Relations of a sprinkling into a flat ``dimension``-dim diamond at each of ``sizes``
    (at most :data:`MAX_SPRINKLINGS`, evenly picked), each seeded by its size and place."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    if len(sizes) > MAX_SPRINKLINGS:
        sizes = sizes[np.linspace(0, len(sizes) - 1, MAX_SPRINKLINGS).astype(int)]
    seeds = (1_000_003 * int(n) + i for i, n in enumerate(sizes))
    return [
        sprinkle(int(n), dimension, seed).relations for n, seed in zip(sizes, seeds, strict=True)
    ]
