"""What a kind of embedded dataset is asked: its causal sets, its labels, what it offers."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import Registry

if TYPE_CHECKING:
    import numpy as np

    from ..physics import CausalSet

DATA_KINDS: Registry[DataKind] = Registry("data.kind")


class DataKind:
    """A kind of embedded causal set; subclasses set the class attributes and implement
    :meth:`draw`. Its docstring's first line says what its sets are."""

    name: ClassVar[str] = ""  # the value of data.kind; a subclass with one is registered
    coordinates: ClassVar[bool] = False  # its graphs carry pos and time (sprinklings alone)
    uses_h: ClassVar[bool] = False  # it reads data.h (a curvature, or a range to draw from)
    # its sets are flat sprinklings into diamonds, labelled by the dimension's index alone:
    # generated many at a time from their coordinates (not one by one through draw)
    flat_diamonds: ClassVar[bool] = False
    # a task to give where the kind has no classes for the implicit classification (y)
    example_task: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name:
            DATA_KINDS.add(cls)

    def classes(self, dimensions: Sequence[int]) -> int | None:
        """How many classes its ``y`` has (None: it has none to learn)."""
        return None

    def classes_shown(self) -> str:
        """How many classes its ``y`` has, in words, for the documentation."""
        classes = self.classes((2, 3, 4))
        return "none" if classes is None else str(classes)

    def two_d(self, dimensions: Sequence[int]) -> bool:
        """Whether its causal sets are 2D (and so have light-cone ranks)."""
        return self.coordinates and tuple(dimensions) == (2,)

    def draw(
        self,
        rng: np.random.Generator,
        n: int,
        d: int,
        seed: int,
        labels: dict[str, Any],
        h: Sequence[float],
    ) -> CausalSet:
        """One causal set of ``n`` elements (dimension ``d`` where it has one) from the graph's
        own ``rng`` and ``seed``; ``labels`` (a flat sprinkling's) changed where it differs."""
        raise NotImplementedError


def flat_sprinkling_labels(dimension: int) -> dict[str, Any]:
    """The labels of a flat sprinkling; the kinds change those where their sets differ."""
    return {
        "y": 0,
        "dimension": float(dimension),
        "spacetime": 0,
        "h": 0.0,
        "manifold_like": 1,
        "cset_type": 0,
    }


def reference_markdown() -> str:
    """The table of the kinds for the documentation, from their classes (docs/data.md)."""
    lines = ["| `data.kind` | causal sets and `y` | classes of `y` |", "|---|---|---|"]
    for cls in DATA_KINDS:
        text = " ".join((cls.__doc__ or "").split()).replace("``", "`")
        lines.append(f"| `{cls.name}` | {text} | {cls().classes_shown()} |")
    return "\n".join(lines)


@functools.cache
def _instance(cls: type[DataKind]) -> DataKind:
    return cls()


def data_kind(name: str, *, key: str | None = None) -> DataKind:
    """The kind ``name`` names; a ConfigError naming ``key`` (``data.kind``) if none."""
    return _instance(DATA_KINDS.get(name, key=key))
