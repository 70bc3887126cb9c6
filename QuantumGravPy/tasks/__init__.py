"""What a task learns (``tasks[i].type``): one class per kind of task.

- ``classification`` (:mod:`.classification`): one class out of several, as logits;
- ``binary`` (:mod:`.binary`): 0 or 1, as one logit;
- ``regression`` (:mod:`.regression`): one or more real values;
- ``count`` (:mod:`.count`): whole numbers of 0 or more, as the log of their expected value.

What each is asked is :class:`~.base.TaskKind`'s; :func:`task_kind` gives the one of a name. A
new kind is a new module here: every module of this package is imported, and each subclass with
a ``name`` registers itself. Imports only the ground floor (and torch, numpy, torchmetrics and
matplotlib when a method needs them).
"""

from ..registry import import_all
from .base import KINDS, TaskKind, lower_is_better, reference_markdown, task_kind
from .metric import Metric

import_all(__name__, __path__)

__all__ = ["KINDS", "Metric", "TaskKind", "lower_is_better", "reference_markdown", "task_kind"]
