"""What a study leaves in its directory, redrawn after every trial: ``trials.csv``,
``best.yaml`` (the best trial's complete config, ready for ``qg train``) and PNG plots."""

from __future__ import annotations

import copy
import csv
import io
import math
import warnings
from pathlib import Path
from typing import Any

import yaml

from ..config import config_from_dict
from ..config.loading import set_key
from ..logs import get_logger
from ..runs.layout import write_atomic
from .plots import plot_history, plot_params
from .space import SearchSpace

TRIALS_CSV = "trials.csv"
BEST_YAML = "best.yaml"
BEST_RUN = "best"  # best.yaml trains into STUDY_DIR/best
PLOTS = {
    "history": "optimization_history.png",
    "importances": "param_importances.png",
    "slice": "objective_vs_params.png",
}


SURPLUS = "surplus"  # a user attribute: asked for by two jobs at once, never run (study.py)


def counted(trial: Any) -> bool:
    """Whether a trial counts towards the study's total: not one whose job was killed (it is
    run again), not one waiting to run, not a surplus one."""
    state = trial.state.name
    if state == "FAIL":
        return not (trial.user_attrs.get("interrupted") or trial.user_attrs.get(SURPLUS))
    return state != "WAITING"


def shown(trial: Any) -> bool:
    """Whether a trial is one of the study's trials for a person: it ran, or is running."""
    return trial.state.name != "WAITING" and not trial.user_attrs.get(SURPLUS)


def write_outputs(
    study: Any, space: SearchSpace, study_dir: Path, *, final: bool = False, plots: bool = True
) -> None:
    """trials.csv, best.yaml and (with ``plots``) the plots; a failing plot costs a warning,
    never the study. ``final``: the study's last word, which says why the importances were not
    drawn (the plots are always drawn then)."""
    trials = [t for t in study.get_trials(deepcopy=False) if shown(t)]
    write_atomic(study_dir / TRIALS_CSV, trials_csv(trials, space))
    best = best_trial(trials, space)
    if best is not None:
        write_atomic(study_dir / BEST_YAML, best_yaml(best, space, study_dir))
    if not (plots or final):
        return
    try:
        why_not = draw_plots(study, study_dir, space)
    except Exception as e:
        get_logger().warning("could not draw the study's plots: %s", e)
        return
    if final and why_not:
        get_logger().info("%s", why_not)


def trials_csv(trials: list[Any], space: SearchSpace) -> str:
    keys = [p.key for p in space.params]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["number", "state", *keys, "objective", "epochs", "run_dir", "error"])
    for t in trials:
        value = t.value if t.state.name == "COMPLETE" else None
        if t.state.name == "PRUNED" and t.intermediate_values:
            value = t.intermediate_values[max(t.intermediate_values)]  # where it was stopped
        writer.writerow(
            [
                t.number,
                t.state.name,
                *(t.params.get(k, "") for k in keys),
                "" if value is None else repr(float(value)),
                t.user_attrs.get("epochs", ""),
                t.user_attrs.get("run_dir", ""),
                t.user_attrs.get("error", ""),
            ]
        )
    return out.getvalue()


def best_trial(trials: list[Any], space: SearchSpace) -> Any | None:
    done = [t for t in trials if t.state.name == "COMPLETE" and not math.isnan(t.value)]
    if not done:
        return None
    sign = 1 if space.direction == "minimize" else -1
    return min(done, key=lambda t: (sign * t.value, t.number))


def best_yaml(trial: Any, space: SearchSpace, study_dir: Path) -> str:
    raw = copy.deepcopy(trial.user_attrs["config"])
    set_key(raw, "training.path", str(study_dir / BEST_RUN))
    config_from_dict(raw)  # still a valid config (the check qg train will make)
    values = ", ".join(f"{k}={trial.params[k]!r}" for k in trial.params)
    header = (
        f"# The best trial of the study: trial {trial.number}, {space.metric} {trial.value:.6g} "
        f"({space.direction}), run in {trial.user_attrs.get('run_dir')}\n"
        f"# with {values}\n"
        "# Train it again with: qg train best.yaml (it trains into training.path below)\n"
    )
    return header + yaml.safe_dump(raw, sort_keys=False)


# Ranking parameters by importance needs two or more that took different values among the
# finished trials, and this many finished trials for each of them: with fewer, Optuna's
# estimate (a forest of trees fitted to the trials) still hands every parameter a share, one
# that never varied included.
IMPORTANCE_TRIALS_PER_PARAMETER = 3


def draw_plots(study: Any, study_dir: Path, space: SearchSpace) -> str | None:
    """The optimisation history, objective against each parameter, and (once the finished
    trials can rank them) the importances of the parameters that varied; each written
    atomically. Returns why the importances were not drawn, if they were not."""
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not complete:
        return None
    trials = [t for t in study.get_trials(deepcopy=False) if shown(t)]

    def history(path: Path) -> None:
        plot_history(trials, space.metric, space.direction, path)

    def params(path: Path) -> None:
        plot_params(trials, space.params, space.metric, path)

    drawings = [("history", history), ("slice", params)]
    keys = [p.key for p in space.params]
    varied = [k for k in keys if len({repr(t.params.get(k)) for t in complete}) > 1]
    needed = max(2, len(varied)) * IMPORTANCE_TRIALS_PER_PARAMETER
    why_not = None
    if len(varied) >= 2 and len(complete) >= needed:
        drawings.append(
            ("importances", lambda path: _importances(study, space.metric, varied, path))
        )
    else:
        why_not = (
            f"{PLOTS['importances']} not drawn: {len(varied)} parameter(s) took different "
            f"values among the {len(complete)} finished trial(s) "
            f"({', '.join(varied) or 'none'}); ranking parameters needs 2 or more that did and "
            f"{IMPORTANCE_TRIALS_PER_PARAMETER} finished trials for each ({needed} here)"
        )
    for name, draw in drawings:
        tmp = study_dir / f".{PLOTS[name]}.tmp"
        draw(tmp)
        tmp.replace(study_dir / PLOTS[name])
    return why_not


def _importances(study: Any, metric: str, varied: list[str], path: Path) -> None:
    import matplotlib
    import matplotlib.pyplot as plt  # Optuna draws with pyplot; the figure is closed here
    import optuna.visualization.matplotlib as ov

    # Optuna switches pyplot to its own style sheet; the context puts the settings back, so
    # the other pictures of this process keep matplotlib's.
    with warnings.catch_warnings(), matplotlib.rc_context():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        ax = ov.plot_param_importances(study, params=varied, target_name=metric)
        figure = ax.figure
        figure.savefig(path, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
