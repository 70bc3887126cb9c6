"""Reading the YAML a user gives (a config, a search space, an override's value): plain data
only, parsed by libyaml where it is installed, and refused in one line when it is too large,
nested too deep, or its aliases would expand it past a bound.

The checks run on the parser's events, before any Python object is built: PyYAML's composer
recurses once per level (a RecursionError past about 300), and its aliases share one object
that every later walk over the config (validation, ``config_to_dict``, writing config.yaml)
expands again, so a billion-laughs file of 400 bytes would otherwise be walked 10^8 times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

# A config is a few kilobytes (the shipped ones are under 10 KiB); 1 MiB leaves room for long
# lists in free mappings and still parses in well under a second.
MAX_BYTES = 1 << 20
# Sections nest about 5 levels; free mappings (model.kwargs, data.dataset_kwargs) add a few.
MAX_DEPTH = 64
# What aliases may add in all, counted in values (scalars, lists and mappings): reusing a
# block of settings costs tens; a billion-laughs file asks for 10^8 or more.
MAX_ALIASED = 100_000

# libyaml's loader when PyYAML was built with it (tens of times faster); the same safe
# constructors either way, and its errors carry line marks as the pure-Python ones do.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml_file(path: Path) -> Any:
    """The plain data of the YAML file ``path``; OSError as ``open`` raises it, yaml.YAMLError
    for invalid YAML or tags, ConfigError naming the file for one over the limits above."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)  # never more: /dev/zero or a 5 GB file costs 1 MiB
    if len(data) > MAX_BYTES:
        raise ConfigError(
            f"{path}: the file is larger than {MAX_BYTES // 1024**2} MiB, the most a config or "
            "search space may be (they hold settings, a few KiB); keep data in files of its "
            "own, which the config names"
        )
    return parse_yaml(data, str(path))


def parse_yaml(text: str | bytes, source: str, *, within: tuple[str, ...] = ()) -> Any:
    """The plain data of ``text``; ``source`` names it in errors. ``within`` is the key path
    where the value goes (an override's key): each of its parts is a level above the value."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: the value is larger than {MAX_BYTES // 1024**2} MiB")
    if len(within) > MAX_DEPTH:
        raise ConfigError(
            f"{source}: nested more than {MAX_DEPTH} levels deep{_path(within, [])}; a config "
            "needs a handful of levels"
        )
    _check_events(text, source, within)
    return yaml.load(text, Loader=LOADER)  # a safe loader: plain data only


class _Open:
    """A sequence or mapping being parsed: where the parser is in it, and what it holds."""

    __slots__ = ("anchor", "at_key", "height", "index", "key", "mapping", "values")

    def __init__(self, mapping: bool, anchor: str | None):
        self.mapping, self.anchor = mapping, anchor
        self.at_key, self.key, self.index = True, "?", 0
        self.values, self.height = 0, 0

    def where(self) -> str:
        if not self.mapping:
            return f"[{self.index}]"
        return "." + (self.key if not self.at_key else "?")

    def add(self, event: Any, values: int, height: int) -> None:
        """One node (a key or a value) of this container ended, holding ``values``."""
        self.values += values
        self.height = max(self.height, height)
        if not self.mapping:
            self.index += 1
        elif self.at_key:
            self.key = str(event.value) if isinstance(event, yaml.ScalarEvent) else "?"
            self.at_key = False
        else:
            self.at_key = True


def _check_events(text: str | bytes, source: str, within: tuple[str, ...]) -> None:
    """Depth and alias expansion counted from the parser's events (libyaml's parser keeps its
    own stack, so no depth recurses here); the sizes of anchors are numbers, never objects."""
    stack: list[_Open] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor: (values it expands to, its levels)
    aliased, depth = 0, len(within)
    loader = LOADER(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                if depth + len(stack) + 1 > MAX_DEPTH:
                    _too_deep(source, within, stack, event)
                stack.append(_Open(isinstance(event, yaml.MappingStartEvent), event.anchor))
                continue
            if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                node = stack.pop()
                values, height = node.values + 1, node.height + 1
                anchor = node.anchor
            elif isinstance(event, yaml.ScalarEvent):
                values, height, anchor = 1, 0, event.anchor
            elif isinstance(event, yaml.AliasEvent):
                anchor = None
                if event.anchor not in anchors:
                    if any(node.anchor == event.anchor for node in stack):
                        raise ConfigError(
                            f"{source}: the alias *{event.anchor} (line "
                            f"{event.start_mark.line + 1}) lies inside its own anchor "
                            f"&{event.anchor}, which would repeat it without end"
                        )
                    continue  # undefined: the composer names it
                values, height = anchors[event.anchor]
                aliased += values
                if aliased > MAX_ALIASED:
                    raise ConfigError(
                        f"{source}: its aliases would expand it by more than {MAX_ALIASED:,} "
                        f"values (at *{event.anchor}, line {event.start_mark.line + 1}"
                        f"{_path(within, stack)}); repeat settings by writing them out, "
                        "not by nesting anchors"
                    )
                if depth + len(stack) + height > MAX_DEPTH:
                    _too_deep(source, within, stack, event)
            else:  # stream and document boundaries
                continue
            if anchor is not None:
                anchors[anchor] = (values, height)
            if stack:
                stack[-1].add(event, values, height)
    finally:
        loader.dispose()


def _path(within: tuple[str, ...], stack: list[_Open], most: int = 8) -> str:
    parts = [*("." + k for k in within), *(node.where() for node in stack)]
    if not parts:
        return ""
    shown = "".join(parts[:most]).lstrip(".") + ("..." if len(parts) > most else "")
    return f", under {shown}"


def _too_deep(source: str, within: tuple[str, ...], stack: list[_Open], event: Any) -> None:
    raise ConfigError(
        f"{source}: nested more than {MAX_DEPTH} levels deep (line {event.start_mark.line + 1}"
        f"{_path(within, stack)}); a config needs a handful of levels"
    )
