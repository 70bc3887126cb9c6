"""Reading a config: YAML, ``key.path=value`` overrides, and the walk that validates them.

The walk follows the dataclasses of :mod:`.schema`: it rejects unknown keys, wrong types and
values out of range with an error naming the dotted key, what was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml

from ..errors import ConfigError
from ..logs import get_logger
from .across import check_across
from .dotted import config_folder, import_extensions, resolve
from .schema import Config
from .yamlfile import parse_yaml, read_yaml_file


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """Read a YAML file, apply ``key.path=value`` overrides and return the validated config."""
    path = Path(path)
    overrides = list(overrides)
    try:
        raw = read_yaml_file(path)  # plain data only: tags that build Python objects are refused
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except yaml.constructor.ConstructorError as e:
        where = f" (line {e.problem_mark.line + 1})" if e.problem_mark else ""
        raise ConfigError(
            f"{path}: YAML tags are not allowed{where}: a config holds plain values and names "
            f"Python objects by dotted path ({' '.join(str(e.problem).split())})"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(e).split())}") from None
    if raw is None:
        if not overrides:
            defaults = Config()
            raise ConfigError(
                f"{path}: the file is empty, which would train every default "
                f"({defaults.data.num_graphs} generated causal sets, "
                f"{defaults.training.num_epochs} epochs into {defaults.run_dir}); write "
                "the keys you mean (configs/train.yaml shows them all), or {} to train the "
                "defaults"
            )
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: expected a mapping of keys at the top level, found {_kind(raw)}"
        )
    config_folder(path)  # a module beside the config is found there
    try:
        return config_from_dict(apply_overrides(raw, overrides))
    except ConfigError as e:
        if str(e).startswith("override "):  # the override itself is malformed: it says so
            raise
        raise ConfigError(f"{_blame(raw, overrides, e, path)}: {e}") from None


def _blame(raw: dict[str, Any], overrides: list[str], error: ConfigError, path: Path) -> str:
    """Who made the mistake: the override that sets the key the error names, or the first one
    after which the config no longer holds; the file, when it fails without any override."""
    key = str(error).split(":", 1)[0].split("[", 1)[0]
    for item in reversed(overrides):
        name = item.partition("=")[0]
        if name == key or key.startswith(name + ".") or name.startswith(key + "."):
            return f"override {item!r}"
    try:
        _whole(upgrade(raw)[0])
    except ConfigError:
        return str(path)
    for i, item in enumerate(overrides):
        try:
            _whole(upgrade(apply_overrides(raw, overrides[: i + 1]))[0])
        except ConfigError:
            return f"override {item!r}"
    return str(path)


def config_from_dict(raw: Mapping[str, Any]) -> Config:
    """The validated config of a plain mapping; keys of earlier versions are read as what they
    became, each with a note."""
    raw, notes = upgrade(raw)
    if isinstance(raw, Mapping) and raw.get("extensions"):
        import_extensions(raw["extensions"])  # what they register, the rest may name
    config = _whole(raw)
    for note in notes:
        get_logger().warning("note: %s", note)
    return config


def _whole(raw: Any) -> Config:
    """The config of ``raw`` (its keys those of this version): each section built and checked,
    then the settings of different sections against each other."""
    config = _build(Config, raw, "")
    check_across(config)
    return config


# Keys of earlier versions that a strategy's section now holds: old key, (section, key).
MOVED = {
    "shards": ("invariant", "micro_batches"),
    "micro_batches": ("invariant", "micro_batches"),
    "fsdp_modules": ("fsdp", "modules"),
}


def upgrade(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """``raw`` with the keys of earlier versions replaced by what they became, and a note for
    each: ``parallel.shards`` and ``parallel.micro_batches`` are
    ``parallel.invariant.micro_batches``; ``parallel.fsdp_modules`` is
    ``parallel.fsdp.modules``; ``parallel.invariant: true`` is ``parallel.strategy:
    invariant``."""
    parallel = raw.get("parallel") if isinstance(raw, Mapping) else None
    if not isinstance(parallel, Mapping):
        return raw, []
    old_switch = "invariant" in parallel and not isinstance(parallel["invariant"], Mapping)
    if not old_switch and not set(MOVED) & set(parallel):
        return raw, []
    parallel, notes = _deep_copy(parallel), []
    if old_switch:
        invariant = parallel.pop("invariant")
        if invariant not in (True, False):
            raise ConfigError(
                f"parallel.invariant: expected a section (the invariant strategy's settings), "
                f"or true or false as earlier versions did, found {invariant!r}"
            )
        strategy = parallel.get("strategy", "ddp")
        if invariant and strategy not in ("ddp", "invariant"):
            raise ConfigError(
                f"parallel.invariant: only with parallel.strategy ddp (found {strategy})"
            )
        if invariant:
            parallel["strategy"] = "invariant"
            notes.append(
                "parallel.invariant: true is now written parallel.strategy: invariant; read as such"
            )
    for old, (section, key) in MOVED.items():
        if old not in parallel:
            continue
        new = f"parallel.{section}.{key}"
        into = parallel.setdefault(section, {})
        if not isinstance(into, dict) or key in into:
            raise ConfigError(f"parallel.{old}: the old name of {new}; give only {new}")
        into[key] = parallel.pop(old)
        notes.append(f"parallel.{old} is now called {new}; read as such")
    return {**raw, "parallel": parallel}, notes


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain YAML-safe dict (tuples become lists), as a config file writes it: a field of
    sections (``parallel.settings``) as the sections themselves."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            out = {}
            for f in dataclasses.fields(v):
                value = plain(getattr(v, f.name))
                if f.metadata.get("sections"):
                    out.update(value)
                else:
                    out[f.name] = value
            return out
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(config)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set; values are parsed as YAML."""
    result = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise ConfigError(f"override {item!r}: expected key.path=value")
        try:
            named = f"override {item!r}" if len(item) <= 200 else f"override '{item[:60]}...'"
            value = parse_yaml(text, named, within=tuple(key.split(".")))
        except yaml.YAMLError:
            raise ConfigError(f"override {item!r}: the value is not valid YAML") from None
        set_key(result, key, value)
    return result


def set_key(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of the nested dict ``raw`` to ``value``, making sections as needed."""
    node = raw
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"{key}: {where} is {_kind(child)}, not a section")
        node = child
    node[parts[-1]] = value


# --- the schema walker ---------------------------------------------------------------------------


def build_section(cls: type, raw: Any, key: str) -> Any:
    """The dataclass ``cls`` from the section ``raw`` found at ``key`` (a dotted key such as
    ``parallel.fsdp``), checked as every key of the config is: what a component that declares
    its own settings (a strategy) reads them with."""
    return _build(cls, {} if raw is None else raw, key + ".")


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{prefix.rstrip('.') or 'config'}: expected a section (mapping), found {_kind(raw)}"
        )
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    # A field marked "sections" takes the sections (mappings) under names of its own, which
    # the code that reads them checks (parallel.fsdp: the strategy of that name).
    open_field = next((n for n, f in fields.items() if f.metadata.get("sections")), None)
    sections = {}
    for key in raw:
        if key in fields and key != open_field:
            continue
        if open_field is not None and key != open_field and isinstance(raw[key], Mapping):
            sections[key] = _deep_copy(raw[key])
            continue
        known = [n for n in fields if n != open_field]
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {prefix}{close[0]}?" if close else ""
        raise ConfigError(f"{prefix}{key}: unknown key (known here: {', '.join(known)}){hint}")
    values = {open_field: sections} if open_field is not None else {}
    for name, f in fields.items():
        if name == open_field:
            continue
        key = prefix + name
        if name in raw:
            value = _convert(hints[name], raw[name], key)
            check = f.metadata.get("check")
            if check is not None and value is not None and not check(value):
                raise ConfigError(f"{key}: expected {f.metadata['expected']}, found {value!r}")
            values[name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: required key is missing")
    obj = cls(**values)
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        text = _convert(args[0], value, key)
        resolve(text, key=key)  # fail now, at load time, if it does not import
        return text
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        # One value or a list of them (str | tuple[str, ...]): a list goes to the list type.
        lists = [a for a in options if typing.get_origin(a) is tuple]
        if len(options) > 1 and lists and isinstance(value, (list, tuple)):
            return _convert(lists[0], value, key)
        scalars = [a for a in options if a not in lists] or options
        return _convert(scalars[0], value, key)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".")
    if origin is Literal:
        if isinstance(value, bool) and str(value).lower() in args:
            value = str(value).lower()  # transpose: true in YAML is the boolean true
        elif isinstance(value, int) and str(value) in args:
            value = str(value)  # precision: 32 in YAML is the integer 32
        if value not in args:
            raise ConfigError(
                f"{key}: expected one of {', '.join(map(str, args))}, found {value!r}"
            )
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, found {_kind(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} items, found {list(value)}")
        return tuple(
            _convert(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, found {_kind(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, found {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, found {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, found {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {key}")  # a schema bug, not user error


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list {value!r}"
    return f"{type(value).__name__} {value!r}"


def _deep_copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in raw.items()}


def per_process(config: Config, world_size: int) -> Config:
    """``config`` for one of ``world_size`` processes: with ``training.global_batch_size``,
    ``training.batch_size`` is its share. One line naming both numbers if it does not divide."""
    t = config.training
    if t.global_batch_size is None:
        return config
    if t.global_batch_size % world_size:
        raise ConfigError(
            f"training.global_batch_size: {t.global_batch_size} graphs do not divide over "
            f"{world_size} processes; choose a multiple of {world_size}"
        )
    share = t.global_batch_size // world_size
    return dataclasses.replace(config, training=dataclasses.replace(t, batch_size=share))
