"""Hyperparameter search with Optuna: ``qg tune`` and :func:`tune`.

- :mod:`.space`, :mod:`.space_file`: the search space, and its file validated against the
  config before any trial;
- :mod:`.storage`: where the study lives (a journal file by default, or a database URL);
- :mod:`.study`: the study's own process: asks for trials, runs them K at a time, tells results,
  and on ``--resume`` reruns trials a killed job left running (:mod:`.abandoned`);
- :mod:`.trial`: what a trial's processes run (an ordinary run; rank 0 reports and prunes);
- :mod:`.results`: trials.csv, best.yaml and the plots.

Sits above ``training`` (a trial is a training run) and below the command line. Optuna is the
``tune`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..config import Config, apply_overrides, config_from_dict, config_to_dict, load_config
from .abandoned import STALE_AFTER_S
from .space import SearchSpace, trial_config
from .space_file import load_space
from .study import Tuner
from .trial import PruningJudge

__all__ = ["PruningJudge", "SearchSpace", "load_space", "trial_config", "tune"]


def tune(
    config: Config | str | Path,
    space: str | Path | Mapping[str, Any],
    *,
    trials: int,
    parallel: int = 1,
    storage: str | None = None,
    study: str | None = None,
    resume: bool = False,
    stale_after_s: float = STALE_AFTER_S,
    overrides: Iterable[str] = (),
) -> Any:
    """Search ``space`` (a YAML file or a mapping) around ``config`` (a Config or a YAML file,
    with ``key=value`` ``overrides``) with ``trials`` trials, ``parallel`` at a time.

    The study lives in the config's ``training.path``: each trial's run in ``trial_NNNN/``,
    ``trials.csv``, ``best.yaml`` and the plots, and (unless ``storage`` names another place)
    the study itself in ``study.journal``. ``study`` names it (default: the config's name);
    ``resume=True`` continues it; a trial running on another machine is taken as abandoned
    after ``stale_after_s`` seconds without a heartbeat. Returns the Optuna study.
    """
    if isinstance(config, Config):
        base = config_from_dict(apply_overrides(config_to_dict(config), overrides))
    else:
        base = load_config(config, overrides)
    search = load_space(space, base)
    return Tuner(
        base,
        search,
        trials=trials,
        parallel=parallel,
        storage=storage,
        study_name=study,
        resume=resume,
        stale_after_s=stale_after_s,
    ).run()
