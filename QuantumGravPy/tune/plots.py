"""A study's pictures, drawn from its trials after every trial.

- ``optimization_history.png``: each finished trial's objective at its number, each pruned
  trial at the last value it reported (the epoch it was stopped after), and the best finished
  trial so far;
- ``objective_vs_params.png``: the objective against each searched parameter, one panel each,
  coloured by trial number, on a logarithmic axis where the parameter is searched on one;
- ``param_importances.png``: Optuna's importance estimate (drawn in :mod:`.results`).

matplotlib is used without pyplot, as for the pictures of runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..figures import new_figure
from .space import Param

FINISHED, PRUNED, BEST = "tab:blue", "0.55", "tab:red"  # finished and pruned trials, best


def _last_reported(trial: Any) -> float | None:
    values = trial.intermediate_values
    return float(values[max(values)]) if values else None


def plot_history(trials: Sequence[Any], metric: str, direction: str, output: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    finished = [(t.number, float(t.value)) for t in trials if t.state.name == "COMPLETE"]
    pruned = [
        (t.number, v)
        for t in trials
        if t.state.name == "PRUNED" and (v := _last_reported(t)) is not None
    ]
    fig = new_figure(6.4, 4.2)
    ax = fig.subplots()
    ax.scatter(*_columns(finished), color=FINISHED, zorder=3, label="finished")
    if pruned:
        ax.scatter(
            *_columns(pruned), color=PRUNED, marker="x", zorder=3, label="pruned (last epoch)"
        )
    pick = min if direction == "minimize" else max
    numbers = range(max(t.number for t in trials) + 1)
    best = [pick((v for n, v in finished if n <= k), default=math.nan) for k in numbers]
    ax.plot(list(numbers), best, color=BEST, drawstyle="steps-post", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="trial", ylabel=metric, title=f"optimization history ({direction} {metric})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(output, format="png", dpi=110)
    return output


def plot_params(trials: Sequence[Any], params: Sequence[Param], metric: str, output: Path) -> Path:
    """One panel per parameter; finished trials coloured by number (viridis, outlined, so
    that none is lost on the background), pruned ones as grey crosses."""
    shown = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    last = max((t.number for t in shown), default=0)
    columns = min(len(params), 3)
    rows = math.ceil(len(params) / columns)
    fig = new_figure(4.2 * columns + 0.8, 3.6 * rows)
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    image = None
    for ax, param in zip(axes, params, strict=False):  # the grid may have more panels
        finished = [t for t in shown if t.state.name == "COMPLETE" and param.key in t.params]
        pruned = [t for t in shown if t.state.name == "PRUNED" and param.key in t.params]
        position = _position(param)
        image = ax.scatter(
            [position(t.params[param.key]) for t in finished],
            [float(t.value) for t in finished],
            c=[t.number for t in finished],
            cmap="viridis",
            vmin=0,
            vmax=max(last, 1),
            edgecolors="black",
            linewidths=0.5,
            zorder=3,
        )
        cut = [(position(t.params[param.key]), _last_reported(t)) for t in pruned]
        cut = [(x, y) for x, y in cut if y is not None]
        if cut:
            ax.scatter(*_columns(cut), color=PRUNED, marker="x", zorder=2, label="pruned")
            ax.legend(fontsize="small")
        if param.log:
            ax.set_xscale("log")  # labels at powers of ten only: they never overlap
        elif param.type == "categorical":
            ax.set_xticks(range(len(param.choices)), [str(c) for c in param.choices])
        else:
            ax.tick_params(axis="x", labelrotation=30)
        ax.set(xlabel=param.key, ylabel=metric)
        ax.grid(alpha=0.3)
    for ax in axes[len(params) :]:  # panels of the grid without a parameter
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=fig.axes, label="trial", shrink=0.8)
    fig.savefig(output, format="png", dpi=110)
    return output


def _columns(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [x for x, _ in points], [y for _, y in points]


def _position(param: Param):
    """Where a value of ``param`` goes on the x axis: itself, or a categorical's index."""
    if param.type != "categorical":
        return float
    return lambda value: param.choices.index(value) if value in param.choices else math.nan
