"""Things chosen by name in a config, each one class in one file: a :class:`Registry` of them.

A parallel strategy (``parallel.strategy``), a task type (``tasks[i].type``) and a file format
(``data.files``' suffixes) are each a class that registers itself under its name when its module
is imported; the package that holds them imports every module in it, so that adding one is
adding a file. The rest of the code asks the registry for the class and then asks the class,
instead of comparing names.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterator
from typing import Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes by name, for the config key ``key`` (named in the error an unknown name gets)."""

    def __init__(self, key: str):
        self.key = key
        self._classes: dict[str, type[T]] = {}

    def add(self, cls: type[T]) -> type[T]:
        name = cls.name  # type: ignore[attr-defined]
        known = self._classes.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"{self.key}: {name!r} is taken by {known.__module__}.{known.__name__}")
        self._classes[name] = cls
        return cls

    def get(self, name: str, *, key: str | None = None) -> type[T]:
        """The class registered as ``name``; a :class:`ConfigError` naming the key (``key``,
        default the registry's) otherwise."""
        if name in self._classes:
            return self._classes[name]
        close = difflib.get_close_matches(str(name), self._classes, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"{key or self.key}: unknown {name!r} (known: {', '.join(sorted(self._classes))}){hint}"
        )

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __iter__(self) -> Iterator[type[T]]:
        return iter(sorted(self._classes.values(), key=lambda cls: cls.name))  # type: ignore


def import_all(package: str, path: list[str]) -> None:
    """Import every module of ``package`` (whose ``__path__`` is ``path``): each registers what
    it defines. Called at the end of the package's ``__init__``."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")
