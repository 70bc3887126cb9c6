"""Objects a config builds by name, inside ``model.kwargs``: plain data that stands for a
Python object, never a YAML tag.

- ``{class: dotted.path, kwargs: {...}}``: an instance, ``cls(**kwargs)`` (its kwargs may hold
  such objects too);
- ``{object: dotted.path}``: the object itself (a class, a function), not called.

Paths are imported and the kwargs checked against the class's signature while the config loads,
each error naming the key (``model.kwargs.conv.class``); the objects are built when the model is.
A config, and a checkpoint that holds it, stays plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, QGError, RunError, cause, in_user_code
from .dotted import check_kwargs, resolve

CLASS, OBJECT, KWARGS = "class", "object", "kwargs"


def names_object(value: Any) -> bool:
    """Whether ``value`` is a mapping that stands for an object (has ``class`` or ``object``)."""
    return isinstance(value, Mapping) and (CLASS in value or OBJECT in value)


def check_objects(value: Any, key: str) -> None:
    """Every object ``value`` names, checked as the config loads: its form, its path (imported)
    and, for a class, its kwargs against the signature; a ConfigError naming the key."""
    if names_object(value):
        path, kwargs = _parts(value, key)
        if OBJECT in value:
            resolve(path, key=f"{key}.{OBJECT}")
            return
        cls = resolve(path, key=f"{key}.{CLASS}")
        if not callable(cls):
            raise ConfigError(f"{key}.{CLASS}: {path} cannot be called to build an object")
        check_kwargs(cls, dict(kwargs), f"{key}.{KWARGS}", name=path)
        check_objects(kwargs, f"{key}.{KWARGS}")
    elif isinstance(value, Mapping):
        for name, item in value.items():
            check_objects(item, f"{key}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_objects(item, f"{key}[{i}]")


def build_objects(value: Any, key: str) -> Any:
    """``value`` with every object it names built (inner ones first), the rest as it is."""
    if names_object(value):
        path, kwargs = _parts(value, key)
        if OBJECT in value:
            return resolve(path, key=f"{key}.{OBJECT}")
        cls = resolve(path, key=f"{key}.{CLASS}")
        built = build_objects(dict(kwargs), f"{key}.{KWARGS}")
        try:
            return cls(**built)
        except (QGError, RunError):
            raise
        except Exception as e:  # the user's class could not be built: what it raised, where
            mistake = ConfigError(f"{key}: {path}(**kwargs) failed: {cause(e)}")
            raise in_user_code(e, f"building {key} {path}") or mistake from e
    if isinstance(value, Mapping):
        return {name: build_objects(item, f"{key}.{name}") for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [build_objects(item, f"{key}[{i}]") for i, item in enumerate(value)]
    return value


def _parts(value: Mapping[str, Any], key: str) -> tuple[str, Mapping[str, Any]]:
    """The path and kwargs of a mapping that names an object, its form checked."""
    keys = set(value)
    if not (keys <= {CLASS, KWARGS} and CLASS in keys) and keys != {OBJECT}:
        raise ConfigError(
            f"{key}: expected {{class: dotted.path, kwargs: {{...}}}} (an instance) or "
            f"{{object: dotted.path}} (the object itself), found the keys {', '.join(sorted(keys))}"
        )
    path = value.get(CLASS, value.get(OBJECT))
    if not isinstance(path, str):
        raise ConfigError(f"{key}: expected a dotted path, found {path!r}")
    kwargs = value.get(KWARGS) or {}
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{key}.{KWARGS}: expected a mapping, found {kwargs!r}")
    return path, kwargs
