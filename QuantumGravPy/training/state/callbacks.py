"""``training.callbacks``: the user's listeners, told of a run's points after the library's.

A callback is a class named by its dotted path in ``training.callbacks`` (with its ``kwargs``),
built once per process, with any of these methods (each left out is not called)::

    class Notify:
        every_rank = False                      # True: called in every process, not only the first

        def on_train_start(self, trainer): ...
        def on_epoch_start(self, trainer): ...
        def on_epoch_end(self, trainer, row): ...   # row: the epoch's history.csv row (a dict)
        def on_checkpoint(self, trainer, path): ... # a checkpoint just written (first process only)
        def on_train_end(self, trainer, history): ...
        def on_test_end(self, trainer, metrics): ...

``trainer`` is the run's :class:`~QuantumGravPy.Trainer` (or TrainerDDP): its ``config``,
``model``, ``optimizer``, ``rank``, ``run_dir`` and so on. Callbacks look and record; what they
change in the trainer is theirs to answer for. An exception in one ends the run as any error in
the user's code does: one line naming the callback, the method and the line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...config import check_kwargs, resolve
from ...config.hooks import CallbackConfig
from ...errors import ConfigError, QGError, RunError, cause, in_user_code
from ...parallel.deadline import deadline
from .listeners import POINTS, Listener

T = TypeVar("T")


def _call(fn: Callable[[], T]) -> T:
    return fn()


class Callbacks(Listener):
    """The callbacks of ``sections`` (``training.callbacks``), in this process (``main``: the
    first process, where callbacks run unless they say ``every_rank``). ``share(fn)`` runs
    ``fn`` on the first process and hands its failure to every process (the trainer's
    ``on_main``). In a process of its own, a call that does not return within ``timeout_s``
    (parallel.timeout_s) ends the run (:func:`~QuantumGravPy.parallel.deadline.deadline`)."""

    def __init__(
        self,
        sections: Sequence[CallbackConfig],
        *,
        main: bool,
        share: Callable[[Callable[[], Any]], Any] = _call,
        timeout_s: float = math.inf,
    ):
        self.main, self.share = main, share
        self.timeout_s = timeout_s
        self.items: list[tuple[str, Any]] = []
        for i, section in enumerate(sections):
            key = f"training.callbacks[{i}]"
            cls = resolve(section.type, key=f"{key}.type")
            check_kwargs(cls, dict(section.kwargs), f"{key}.kwargs", name=section.type)
            try:
                obj = cls(**section.kwargs)
            except (QGError, RunError):
                raise
            except Exception as e:
                doing = f"building {key} {section.type}"
                mistake = ConfigError(f"{key}: {doing} failed: {cause(e)}")
                raise in_user_code(e, doing) or mistake from e
            if not any(callable(getattr(obj, p, None)) for p in POINTS):
                raise ConfigError(
                    f"{key}: {section.type} has none of the methods a callback may have "
                    f"({', '.join(POINTS)})"
                )
            self.items.append((section.type, obj))

    def on_train_start(self, trainer: Any) -> None:
        self.tell("on_train_start", trainer)

    def on_epoch_start(self, trainer: Any) -> None:
        self.tell("on_epoch_start", trainer)

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        self.tell("on_epoch_end", trainer, row)

    def on_checkpoint(self, trainer: Any, path: Any) -> None:
        # told on the process that wrote the file, inside its writing (which shares failures)
        self("on_checkpoint", trainer, path)
        self("on_checkpoint", trainer, path, every_rank=True)

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        self.tell("on_train_end", trainer, history)

    def on_test_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.tell("on_test_end", trainer, metrics)

    def tell(self, point: str, trainer: Any, *args: Any) -> None:
        """``point`` to the first process's callbacks through ``share`` (a failure there ends
        every process rather than leaving them waiting), then to every process's own. The
        processes meet only where a first-process callback has the point: the callbacks and
        their ``every_rank`` are the same in every process, so all of them skip it alike."""
        everywhere = [
            bool(getattr(obj, "every_rank", False))
            for _, obj in self.items
            if getattr(obj, point, None) is not None
        ]  # for each callback with the method: whether it runs in every process
        if not all(everywhere):
            self.share(lambda: self(point, trainer, *args))
        if any(everywhere):
            self(point, trainer, *args, every_rank=True)

    def __call__(self, point: str, trainer: Any, *args: Any, every_rank: bool = False) -> None:
        """Call ``point`` with ``trainer`` and ``args`` on the callbacks that run here: with
        ``every_rank`` those that say so, in every process; else the others, on the first."""
        if not every_rank and not self.main:
            return
        for name, obj in self.items:
            method = getattr(obj, point, None)
            if method is None or bool(getattr(obj, "every_rank", False)) != every_rank:
                continue
            doing = f"training.callbacks {name}.{point}"
            try:
                with deadline(doing, self.timeout_s):
                    method(trainer, *args)
            except (QGError, RunError):
                raise
            except Exception as e:
                raise in_user_code(e, f"in {doing}") or RunError(f"{cause(e)} in {doing}") from e
