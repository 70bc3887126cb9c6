"""A metric of your own for a kind of task (``tasks[i].metrics``): one class, one file.

A subclass of :class:`Metric` names the kind it measures (``kind``, a task kind's name: its
tasks and those of the kinds built on it that keep its list of metrics may name it; ``count``,
built on ``regression`` with a list of its own, does not take regression's) and its own
``name``, and builds a torchmetrics metric for a task's outputs (``make``). Defining it
registers it: the kind offers it from then on, in the config, the history's columns, early
stopping and tuning; its value is computed as the kind's own metrics are, from states summed
over every process (exact for any number of them when its states are sums, as torchmetrics'
confusion-based ones are). A user's module defines it and the config names the module under
``extensions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from .base import KINDS, TaskKind

if TYPE_CHECKING:
    import torchmetrics

# (kind's name, metric's name): the class
METRICS: dict[tuple[str, str], type[Metric]] = {}


class Metric:
    """A metric for tasks of the kind named ``kind``; subclasses set the class attributes and
    implement :meth:`make`. Its docstring's first line says what it measures."""

    kind: ClassVar[str] = ""  # the task kind it measures
    name: ClassVar[str] = ""  # what tasks[i].metrics calls it; val_<name> in the history
    minimized: ClassVar[bool] = False  # whether smaller is better (early stopping, tuning)

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if not (cls.kind and cls.name):
            return
        owner = KINDS.get(cls.kind, key=f"{cls.__module__}.{cls.__name__}.kind")
        known = METRICS.get((cls.kind, cls.name))
        if cls.name in owner.metrics and (known is None or known.__qualname__ != cls.__qualname__):
            raise TypeError(f"a {cls.kind} task already has a metric {cls.name!r}")
        METRICS[(cls.kind, cls.name)] = cls
        if cls.name not in owner.metrics:
            owner.metrics = (*owner.metrics, cls.name)
        if cls.minimized and cls.name not in owner.minimized:
            owner.minimized = (*owner.minimized, cls.name)

    def make(self, num_outputs: int, **own: Any) -> torchmetrics.Metric:
        """The torchmetrics metric for a task of ``num_outputs`` outputs; pass ``own`` (how
        the library synchronises it) to its constructor."""
        raise NotImplementedError


def own_metric(kind: TaskKind, name: str) -> Metric | None:
    """The metric ``name`` of your own for ``kind`` (or a kind it is built on), if any. The
    nearest kind that names it decides: a kind's own metric of that name is never replaced by
    one for a kind it is built on (``count``'s ``poisson_deviance`` by a regression's)."""
    for cls in type(kind).__mro__:
        found = METRICS.get((getattr(cls, "name", ""), name))
        if found is not None:
            return found()
        if name in vars(cls).get("metrics", ()):
            return None
    return None
