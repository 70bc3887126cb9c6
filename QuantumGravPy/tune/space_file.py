"""A search space file read and validated completely before any trial starts: which config
keys vary and how, what is optimised, the pruner and the sampler.

A space file is keyed by dotted config keys (or the same keys nested), each a parameter::

    training.optimizer.kwargs.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.hidden_channels: {type: int, low: 16, high: 128, step: 16}
    model.conv: {type: categorical, choices: [torch_geometric.nn.GraphConv, ...]}
    objective: {metric: val_loss, direction: minimize}
    pruner: {type: median, n_startup_trials: 3}
    sampler: {type: tpe, seed: 0}     # or random, qmc, gp, grid (every combination, once)

Every value a parameter can take at its ends (low, high, each choice) is put into the base
config and validated like the config itself, so a range the config refuses fails here, naming
the key, and not in trial 17. Combinations can still be impossible; such a trial is recorded as
failed with its error.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import types
import typing
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..config import Config, history_columns, improves_towards
from ..config.yamlfile import read_yaml_file
from ..errors import ConfigError
from .space import Param, SearchSpace, pruners, require_optuna, samplers, trial_config

RESERVED = ("objective", "pruner", "sampler")
PARAM_FIELDS = {
    "float": {"type", "low", "high", "log", "step"},
    "int": {"type", "low", "high", "log", "step"},
    "categorical": {"type", "choices"},
}
DIRECTIONS = {"minimize": "min", "maximize": "max"}
# Each combination is a training run: a study never tries more, and Optuna lists them all
# (about 100 bytes each) when the sampler is made.
MAX_GRID_POINTS = 100_000


def load_space(source: str | Path | Mapping[str, Any], base: Config) -> SearchSpace:
    """Read and validate a search space (a YAML file or a mapping) against the config ``base``.

    Errors are :class:`~QuantumGravPy.errors.ConfigError` naming the file and the key.
    """
    require_optuna()
    if isinstance(source, Mapping):
        return parse_space(source, base)
    path = Path(source)
    try:
        raw = read_yaml_file(path)
    except FileNotFoundError:
        raise ConfigError(f"search space file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read search space file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(e).split())}") from None
    try:
        return parse_space(raw, base)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def parse_space(raw: Any, base: Config) -> SearchSpace:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("expected a mapping of config keys to parameters, found nothing usable")
    params = []
    for key, spec in _flatten(raw):
        _check_key(key)
        param = _param(key, spec)
        for what, value in param.ends():
            try:
                trial_config(base, {key: value}, base.run_dir)
            except ConfigError as e:
                raise ConfigError(f"{key}: the config refuses its {what}: {e}") from None
        params.append(param)
    if not params:
        raise ConfigError("no parameters to search: give at least one config key")
    metric, direction = _objective(raw.get("objective"), base)
    pruner = _section(raw.get("pruner"), "pruner", pruners(), "median")
    sampler = _section(raw.get("sampler"), "sampler", samplers(), "tpe")
    space = SearchSpace(tuple(params), metric, direction, pruner, sampler)
    if sampler["type"] == "grid":
        _check_grid(space)
    return space


def _check_grid(space: SearchSpace) -> None:
    """Every parameter has a list of values, and Optuna can list their combinations: it builds
    all of them as it starts, so a grid past the limit is refused before any list is made."""
    points = space.grid_points()
    if points > MAX_GRID_POINTS:
        sizes = " x ".join(f"{p.key} ({p.grid_size():,})" for p in space.params)
        raise ConfigError(
            f"sampler: the grid has {points:,} combinations ({sizes}), more than the "
            f"{MAX_GRID_POINTS:,} a grid search may list; list fewer values (a larger step), or "
            "sample the space (sampler type tpe or random)"
        )


def _flatten(raw: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, spec) pairs: a mapping with ``type`` is a parameter, others nest keys."""
    out = []
    for key, value in raw.items():
        if not prefix and key in RESERVED:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and "type" not in value and value:
            out += _flatten(value, f"{name}.")
        else:
            out.append((name, value))
    return out


def _check_key(key: str) -> None:
    """``key`` names a value of the config (or a key inside a free mapping such as kwargs)."""
    tp: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        tp = _unwrap(tp)
        if typing.get_origin(tp) is dict:
            return  # kwargs and the like: any key, checked where they are used
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{key}: {'.'.join(parts[:i])} is a value, not a section")
        names = [f.name for f in dataclasses.fields(tp)]
        if part not in names and any(f.metadata.get("sections") for f in dataclasses.fields(tp)):
            return  # a strategy's section (parallel.fsdp): checked by its class, trial_config
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {'.'.join([*parts[:i], close[0]])}?" if close else ""
            raise ConfigError(
                f"{key}: unknown config key {here!r} (known here: {', '.join(names)}){hint}"
            )
        tp = typing.get_type_hints(tp, include_extras=True)[part]
    tp = _unwrap(tp)
    if dataclasses.is_dataclass(tp):
        raise ConfigError(f"{key}: is a section; search one of its keys instead")
    if typing.get_origin(tp) is tuple and _holds_sections(tp):
        raise ConfigError(f"{key}: is a list of sections, which a search space cannot vary")


def _unwrap(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        sections = [a for a in options if dataclasses.is_dataclass(a)]
        return sections[0] if sections else options[0]
    return tp


def _holds_sections(tp: Any) -> bool:
    return any(dataclasses.is_dataclass(a) for a in typing.get_args(tp))


def _param(key: str, spec: Any) -> Param:
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"{key}: expected {{type: float | int | categorical, ...}}, found {spec!r}"
        )
    kind = spec.get("type")
    if kind not in PARAM_FIELDS:
        raise ConfigError(f"{key}.type: expected float, int or categorical, found {kind!r}")
    unknown = sorted(set(spec) - PARAM_FIELDS[kind])
    if unknown:
        known = ", ".join(sorted(PARAM_FIELDS[kind]))
        raise ConfigError(f"{key}.{unknown[0]}: unknown key for a {kind} (known: {known})")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{key}.choices: expected a non-empty list, found {choices!r}")
        for c in choices:
            if c is not None and not isinstance(c, (bool, int, float, str)):
                raise ConfigError(
                    f"{key}.choices: each choice must be a number, string, boolean or null, "
                    f"found {c!r}"
                )
        return Param(key, kind, choices=tuple(choices))
    number = int if kind == "int" else (int, float)
    values = {}
    for field in ("low", "high"):
        value = spec.get(field)
        if value is None:
            raise ConfigError(f"{key}.{field}: required for a {kind}")
        if isinstance(value, bool) or not isinstance(value, number):
            expected = "an integer" if kind == "int" else "a number"
            raise ConfigError(f"{key}.{field}: expected {expected}, found {value!r}")
        values[field] = value
    low, high = values["low"], values["high"]
    if low >= high:
        raise ConfigError(f"{key}: low must be below high, found low {low!r}, high {high!r}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{key}.log: expected true or false, found {log!r}")
    if log and low <= 0:
        raise ConfigError(f"{key}: a log scale needs low > 0, found low {low!r}")
    step = spec.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, number) or step <= 0:
            raise ConfigError(f"{key}.step: expected a positive {kind}, found {step!r}")
        if log and (kind == "float" or step != 1):
            raise ConfigError(f"{key}: step and log exclude each other")
    if kind == "float":
        low, high = float(low), float(high)
    return Param(key, kind, low=low, high=high, log=log, step=step)


def _objective(given: Any, base: Config) -> tuple[str, str]:
    if not isinstance(given, Mapping) or "metric" not in given:
        raise ConfigError(
            "objective: required: {metric: <a validation column>, direction: minimize | maximize}"
        )
    unknown = sorted(set(given) - {"metric", "direction"})
    if unknown:
        raise ConfigError(f"objective.{unknown[0]}: unknown key (known: metric, direction)")
    metric = given["metric"]
    columns = [c for c in history_columns(base) if c.startswith("val_")]
    if metric not in columns:
        raise ConfigError(
            f"objective.metric: {metric!r} is not a validation column of this config "
            f"(choose from {', '.join(columns)})"
        )
    towards = improves_towards(metric)
    direction = given.get("direction", "minimize" if towards == "min" else "maximize")
    if direction not in DIRECTIONS:
        raise ConfigError(
            f"objective.direction: expected minimize or maximize, found {direction!r}"
        )
    if DIRECTIONS[direction] != towards:
        raise ConfigError(
            f"objective.direction: {metric} improves towards {towards}, found {direction!r}"
        )
    return metric, direction


def _section(raw: Any, name: str, kinds: dict[str, Any], default: str) -> dict[str, Any]:
    """``pruner:`` or ``sampler:`` as the file gives it (``raw``, unchecked): a type and its
    class's keyword arguments, checked by building it once."""
    if raw is None:
        raw = {"type": default}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: expected a mapping with a type, found {raw!r}")
    raw = {"type": default, **raw}
    kind = raw["type"]
    if kind not in kinds:
        raise ConfigError(f"{name}.type: expected one of {', '.join(kinds)}, found {kind!r}")
    cls = kinds[kind]
    kwargs = {k: v for k, v in raw.items() if k != "type"}
    accepted = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    for key in kwargs:
        if key not in accepted:
            raise ConfigError(
                f"{name}.{key}: not an argument of the {kind} {name} "
                f"(known: {', '.join(accepted) or 'none'})"
            )
    given = {"search_space": {}} if kind == "grid" else {}  # made from the parameters
    if set(given) & set(kwargs):
        raise ConfigError(f"{name}.search_space: the grid is made from the parameters; remove it")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental-feature notices
            cls(**given, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{name}: the {kind} {name} refuses {kwargs}: {e}") from e
    return dict(raw)
