"""The search space of a study: its parameters (which config keys vary and how), what is
optimised, the pruner and the sampler, and a trial's config made from the values drawn.

The space is read from YAML and validated completely before any trial starts
(:mod:`.space_file`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config, config_from_dict, config_to_dict
from ..config.loading import set_key
from ..errors import ConfigError, require


def pruners() -> dict[str, Any]:
    import optuna

    return {
        "median": optuna.pruners.MedianPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "none": optuna.pruners.NopPruner,
    }


def samplers() -> dict[str, Any]:
    import optuna

    return {
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
        "qmc": optuna.samplers.QMCSampler,
        "gp": optuna.samplers.GPSampler,
        "grid": _grid_sampler(),  # every combination of listed values, once
    }


@functools.cache
def _grid_sampler() -> type:
    """Optuna's grid sampler for a study driven by ask and tell: the study ends by its own
    count of trials (at most the grid's size, checked when it starts), so reaching the end of
    the grid must not stop it (``Study.stop`` is for ``optimize`` alone)."""
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            pass

    return GridSampler


def require_optuna() -> None:
    require("optuna", needed_for="qg tune", extra="tune", library="Optuna")


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: a config key and the values it may take."""

    key: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        if self.type == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            step = 1 if self.step is None else self.step
            return trial.suggest_int(self.key, self.low, self.high, log=self.log, step=step)
        return trial.suggest_categorical(self.key, list(self.choices))

    def grid(self) -> list[Any]:
        """The values a grid search tries: the choices, or low to high (both included) in
        steps; a ConfigError naming the key for a range that has no such list."""
        count = self.grid_size()
        if self.type == "int":
            return list(range(self.low, self.high + 1, self.step or 1))
        if self.type == "float":
            return [self.low + i * self.step for i in range(count)]
        return list(self.choices)

    def grid_size(self) -> int:
        """How many values :meth:`grid` lists, counted without listing them."""
        if self.type == "categorical":
            return len(self.choices)
        if self.log:
            raise ConfigError(f"{self.key}: a log scale has no grid; list the values (categorical)")
        if self.type == "int":
            return len(range(self.low, self.high + 1, self.step or 1))
        if self.step is None:
            raise ConfigError(
                f"{self.key}: a float needs a step to be searched on a grid (or list the "
                "values as a categorical)"
            )
        steps = (self.high - self.low) / self.step
        if not math.isfinite(steps):
            raise ConfigError(f"{self.key}: a step of {self.step!r} lists too many values")
        return math.floor(steps + 1e-9) + 1

    def ends(self) -> list[tuple[str, Any]]:
        """The values checked against the config before the study: (what, value)."""
        if self.type == "categorical":
            return [(f"choice {c!r}", c) for c in self.choices]
        return [(f"low {self.low!r}", self.low), (f"high {self.high!r}", self.high)]


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A validated search space (plain data: it travels to the trial processes)."""

    params: tuple[Param, ...]
    metric: str
    direction: str  # minimize | maximize
    pruner: dict[str, Any]
    sampler: dict[str, Any]

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The trial's value of every parameter, by config key."""
        return {p.key: p.suggest(trial) for p in self.params}

    def make_pruner(self) -> Any:
        kind, kwargs = _split(self.pruner)
        return pruners()[kind](**kwargs)

    def grid_points(self) -> int:
        """How many combinations a grid search has (the product of each parameter's values)."""
        return math.prod(p.grid_size() for p in self.params)

    def make_sampler(self, *, parallel: int = 1, salt: str | None = None) -> Any:
        """The sampler; with ``salt`` (a study continued by this process), its seed is mixed
        with it, so a resumed study or a second worker does not repeat the first suggestions."""
        kind, kwargs = _split(self.sampler)
        if kind == "grid":
            kwargs["search_space"] = {p.key: p.grid() for p in self.params}
        if salt is not None and kwargs.get("seed") is not None:
            kwargs["seed"] = (kwargs["seed"] + zlib.crc32(salt.encode())) % 2**32
        if kind == "tpe" and parallel > 1:
            # Trials running at once are assumed to score badly until they report, so parallel
            # workers do not all sample the same promising point.
            kwargs.setdefault("constant_liar", True)
        return samplers()[kind](**kwargs)

    def best(self, values: list[float]) -> float:
        """The best of a trial's epochs: its objective."""
        finite = [v for v in values if not math.isnan(v)]
        if not finite:
            return math.nan
        return min(finite) if self.direction == "minimize" else max(finite)


def _split(section: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    kwargs = dict(section)
    return kwargs.pop("type"), kwargs


def trial_config(base: Config, values: Mapping[str, Any], run_dir: str | Path) -> Config:
    """``base`` with the trial's values, trained in ``run_dir``; ConfigError if impossible (its
    strategy's refusals included, which the config cannot check as it loads)."""
    raw = config_to_dict(base)
    for key, value in values.items():
        set_key(raw, key, value)
    set_key(raw, "training.path", str(run_dir))
    config = config_from_dict(raw)
    from ..parallel.strategies import strategy_class  # torch: not to answer a config mistake

    strategy_class(config, config.parallel.world_size)
    return config
