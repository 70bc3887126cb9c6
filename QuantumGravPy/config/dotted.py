"""Dotted import paths: how a config names Python objects (a loss, a sampler, a dataset).

Resolved while the config loads, so a typo fails before any work starts, with the key named.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

from ..errors import ConfigError

# A string naming an importable object, such as "torch.nn.CrossEntropyLoss".
DottedPath = Annotated[str, "dotted-path"]


def resolve(dotted: str, *, key: str) -> Any:
    """Import the object a dotted path names; the error names the config key."""
    parts = dotted.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ConfigError(f"{key}: expected a dotted import path, found {dotted!r}")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue  # this prefix is not a module; try a shorter one
            raise ConfigError(f"{key}: importing {module_name!r} failed: {e}") from None
        except Exception as e:  # the user's module itself is broken
            raise ConfigError(f"{key}: importing {module_name!r} failed: {e!r}") from None
        break
    else:
        raise ConfigError(f"{key}: cannot import {dotted!r} (no module named {parts[0]!r})")
    for i in range(split, len(parts)):
        try:
            obj = getattr(obj, parts[i])
        except AttributeError:
            owner = ".".join(parts[:i])
            raise ConfigError(
                f"{key}: cannot import {dotted!r} ({owner!r} has no attribute {parts[i]!r})"
            ) from None
    if not callable(obj):
        raise ConfigError(f"{key}: {dotted!r} is not a class or function")
    return obj
