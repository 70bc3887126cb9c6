"""The run directory's layout: the files a run leaves behind, their names, reading and writing
them, and the guard against overwriting a finished run (:mod:`.run_directory` is one run's
directory as an object, which writes them as the run goes)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DiskFullError, RunDirectoryError, disk_full, flag

CONFIG = "config.yaml"
HISTORY = "history.csv"
SUMMARY = "summary.json"
LOG = "train.log"
ENVIRONMENT = "environment.json"  # software and machine of every start and resume of the run
CHECKPOINTS = "checkpoints"
LAST = "last.pt"  # the checkpoint a resumed run continues from
PREDICTIONS = "test_predictions.npz"  # each task's test predictions and targets
# Anything a run writes; one of them present means the directory holds a run.
TENSORBOARD = "tensorboard"  # tracking.tensorboard's event files
MLFLOW = "mlflow.json"  # tracking.mlflow: the run's id, for a resumed run to continue it
WANDB = "wandb.json"  # tracking.wandb: the run's id and the last epoch sent
WANDB_FILES = "wandb"  # W&B's own folder: logs, and offline runs' records
RANKS = "ranks.csv"  # monitor.timing: per epoch and rank, where the time went
RUN_FILES = (
    CONFIG,
    HISTORY,
    SUMMARY,
    LOG,
    ENVIRONMENT,
    CHECKPOINTS,
    PREDICTIONS,
    TENSORBOARD,
    MLFLOW,
    WANDB,
    WANDB_FILES,
    RANKS,
)


def check_flags(*, overwrite: bool, resume: bool) -> None:
    if overwrite and resume:
        raise ConfigError(
            f"{flag('overwrite')} and {flag('resume')} exclude each other: replace or continue"
        )


def results(path: Path) -> list[str]:
    """What of a run's results ``path`` holds: history, summary, predictions, checkpoints.

    A directory with none of them holds at most the start of a run that never finished an
    epoch (its config, log and environment record): nothing is lost by starting again there.
    """
    found = [name for name in (HISTORY, SUMMARY, PREDICTIONS) if (path / name).exists()]
    return found + [f"{CHECKPOINTS}/{p.name}" for p in sorted((path / CHECKPOINTS).glob("*.pt"))]


def check_run_dir(path: Path, *, overwrite: bool) -> None:
    """Refuse a directory that holds a run's results, unless ``overwrite``.

    A run that stopped before its first epoch ended (a crash, a kill) left no results; starting
    again in its directory is allowed, and appends to its log.
    """
    if not path.exists():
        return
    if not path.is_dir():
        raise RunDirectoryError(f"training.path {path} exists and is not a directory")
    found = results(path)
    if found and not overwrite:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        ended = _ended(path)
        if ended is not None and ended.get("stopped_early"):  # --resume would only test it
            raise RunDirectoryError(
                f"{path} already holds a run that early stopping ended after epoch "
                f"{ended.get('epochs_run')} (best: epoch {ended.get('best_epoch')}); pass "
                f"{flag('overwrite')} to train it anew, or choose another training.path"
            )
        if ended is not None:
            raise RunDirectoryError(
                f"{path} already holds a run that trained all its {ended.get('epochs_run')} "
                f"epochs; pass {flag('resume')} with a larger training.num_epochs to train it "
                f"longer, {flag('overwrite')} to replace it, or choose another training.path"
            )
        raise RunDirectoryError(
            f"{path} already holds a run ({shown}); pass {flag('resume')} to continue it, "
            f"{flag('overwrite')} to replace it, or choose another training.path"
        )


def _ended(path: Path) -> dict[str, Any] | None:
    """The summary a run writes when its training ends (None: it has not, or is unreadable)."""
    try:
        summary = json.loads((path / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and "epochs_run" in summary else None


def prepare_run_dir(path: Path, *, overwrite: bool) -> None:
    """Create the run directory; with ``overwrite``, remove a previous run's files first.

    Only the files a run writes are removed; anything else a user put there stays. Without
    ``overwrite``, what a run that never finished an epoch left (its log above all, which says
    why it stopped) is kept and appended to.
    """
    check_run_dir(path, overwrite=overwrite)
    if overwrite:
        remove_run_files(path)
    (path / CHECKPOINTS).mkdir(parents=True, exist_ok=True)


def remove_run_files(path: Path) -> None:
    """Remove the files a run writes (and only those) from ``path``."""
    for name in RUN_FILES:
        target = path / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def check_startable(path: Path) -> None:
    """For ``--resume`` without a checkpoint: start only where no results would be lost.

    A directory with nothing of a run, or only the config and log of a job that was stopped
    before its first epoch ended, may start from scratch; one with results may not.
    """
    found = results(path)
    if found:
        raise RunDirectoryError(
            f"{flag('resume')}: {path} holds results ({', '.join(found)}) but no "
            f"{CHECKPOINTS}/{LAST} to continue from; pass {flag('overwrite')} to replace the "
            "run, or choose another training.path"
        )


def remove_partial_writes(path: Path) -> None:
    """Delete temporary files of writes that a killed job left unfinished."""
    for directory in (path, path / CHECKPOINTS):
        for tmp in directory.glob(".*.tmp*"):
            tmp.unlink(missing_ok=True)


def write_predictions(path: Path, predictions: dict[str, dict[str, Any]]) -> None:
    """``test_predictions.npz``: for each task ``<task>.graph`` (the row's graph, by position
    in the test set), for an edge-level task ``<task>.pair`` (the row's two nodes, by position
    in their graph), ``<task>.predicted`` (class probabilities, the probability of 1, or
    values in the target's units), ``<task>.true`` and where the row's graph came from:
    ``<task>.source`` (its file, or ``generated``), ``<task>.index`` (its sample in the file,
    or its position among the generated graphs) and, for files of groups, ``<task>.group``;
    in the test set's order."""
    import numpy as np

    arrays = {
        f"{task}.{key}": np.asarray(value)
        for task, parts in predictions.items()
        for key, value in parts.items()
    }
    tmp = path / f".{PREDICTIONS}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    os.replace(tmp, path / PREDICTIONS)


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """The arrays of a run directory's ``test_predictions.npz``, by task (empty if none)."""
    import numpy as np

    if not (path / PREDICTIONS).is_file():
        return {}
    result: dict[str, dict[str, Any]] = {}
    with np.load(path / PREDICTIONS) as arrays:
        for name in arrays.files:
            task, key = name.rsplit(".", 1)
            result.setdefault(task, {})[key] = arrays[name]
    return result


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        if disk_full(e):  # the file as it was stays whole
            raise DiskFullError(f"no space left on the device writing {path}") from e
        raise
    finally:
        tmp.unlink(missing_ok=True)


def write_rows(file: Path, rows: Sequence[dict[str, Any]]) -> None:
    """A CSV file of ``rows`` (every key of any row is a column, in order), atomically."""
    if not rows:
        return
    buffer = io.StringIO()
    fields = list(dict.fromkeys(key for row in rows for key in row))  # every column, in order
    writer = csv.DictWriter(buffer, fieldnames=fields, restval="nan", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(file, buffer.getvalue())


def read_rows(file: Path) -> list[dict[str, float]]:
    """A CSV file of numbers, as :func:`write_rows` writes them."""
    with open(file, newline="", encoding="utf-8") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_history(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    write_rows(path / HISTORY, rows)


def read_history(path: Path) -> list[dict[str, float]]:
    """``history.csv`` of a run directory, numbers parsed."""
    return read_rows(path / HISTORY)


def read_ranks(path: Path, *, up_to: int | None = None) -> list[dict[str, float]]:
    """The rows of ``ranks.csv`` (of epochs up to ``up_to``); none if there is no such file."""
    try:
        rows = read_rows(path / RANKS)
    except (OSError, ValueError, KeyError):
        return []
    for row in rows:
        for key in ("epoch", "rank", "bytes_exchanged"):
            if key in row and math.isfinite(row[key]):
                row[key] = int(row[key])
    return [row for row in rows if up_to is None or row.get("epoch", 0) <= up_to]


def read_environment(path: Path) -> list[dict[str, Any]]:
    """The run's starts and resumes from environment.json; none if it is missing or damaged."""
    try:
        entries = json.loads((Path(path) / ENVIRONMENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def record_environment(path: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the run's list of starts and resumes in environment.json (a
    damaged record is replaced rather than stopping the run)."""
    entries = read_environment(path)
    write_atomic(path / ENVIRONMENT, json.dumps([*entries, entry], indent=2) + "\n")


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON, every NaN or infinite number as null: JSON has no such numbers
    (Python's ``json`` would write a bare ``NaN``, which other readers refuse)."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """summary.json: valid JSON always, a number that is not finite written as null."""
    write_atomic(path / SUMMARY, json_text(summary, indent=2) + "\n")
