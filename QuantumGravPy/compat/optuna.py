"""Optuna's internals: a trial's id in its storage (written for optuna 4.0-5.0). The storage's
public methods (``set_trial_user_attr``, ``set_trial_state_values``) take the id, which a
``Trial`` keeps as ``_trial_id`` with no public reader."""

from __future__ import annotations

from typing import Any

from . import moved

DISTRIBUTION = "optuna"


def trial_id(trial: Any) -> int:
    """The id of ``trial`` (a ``Trial`` or ``FrozenTrial``) in its study's storage."""
    return trial._trial_id


def check() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    try:
        found = trial_id(trial)
    except AttributeError:
        raise moved(DISTRIBUTION, "a Trial keeps its storage id elsewhere than _trial_id") from None
    storage.set_trial_user_attr(found, "checked", True)  # the id the storage takes
    if study.trials[0].user_attrs.get("checked") is not True:
        raise moved(DISTRIBUTION, "a Trial's _trial_id is not its id in the storage")
