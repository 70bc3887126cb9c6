"""Resuming a run: reading its ``last.pt`` and refusing a config that would train something else.

:func:`read_resume_state` is what every resume goes through (``qg train --resume``, the trainer,
a torchrun restart, a SLURM requeue): the checkpoint is loaded, its format checked, and the
config compared with the one it was trained with, key by key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import typing
from collections.abc import Mapping
from typing import Any

from ..config import Config, config_to_dict, per_process
from ..errors import CheckpointError, ConfigError, flag
from ..parallel.strategies import STRATEGIES
from .checkpoint import FORMAT_VERSION, load_checkpoint
from .layout import CHECKPOINTS, LAST, check_startable
from .reproducibility import version_changes

# Keys a resumed run may change: how long it runs, where its files go, and how it is spread over
# processes and devices. Anything else changes what is trained, and is refused without --force.
# training.batch_size and accumulate_grad_batches are compared through the batch per optimizer
# step (below), so a job restarted on fewer GPUs may keep its steps by raising either.
RESUMABLE_KEYS = (
    "name",
    "log_level",
    "extensions",  # where the classes come from; the names the config gives them decide
    "data.root",
    "data.device",  # where batches are assembled: the same batches either way
    "model.activation_checkpointing",  # recomputed activations: the same gradients
    "training.compile",  # the same model, compiled: resumes either way
    "training.plots",  # pictures only
    "training.path",
    "training.num_epochs",
    "training.checkpoint_every",
    "training.num_workers",
    "training.device",
    "training.batch_size",
    "training.global_batch_size",  # compared through the graphs per step
    "training.accumulate_grad_batches",
    "validation.batch_size",
    "testing.batch_size",
    "early_stopping.enabled",
    "early_stopping.patience",
    "early_stopping.grace_period",
    "parallel",
    "tracking",  # watching a run does not change it
)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; keyword dicts are flattened too."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _resumable(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)


def trained_config(config: Config | Mapping[str, Any]) -> dict[str, Any]:
    """The flattened keys that decide what is trained (everything not in RESUMABLE_KEYS)."""
    tree = config if isinstance(config, Mapping) else config_to_dict(config)
    return {k: v for k, v in flatten(tree).items() if not _resumable(k)}


def optional_defaults() -> dict[str, Any]:
    """The default of every key, with a default, of the config's optional sections (those that
    are null unless given, such as ``training.lr_scheduler``), by its flattened name."""
    found: dict[str, Any] = {}

    def walk(cls: type, prefix: str, inside: bool) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kinds = [a for a in typing.get_args(hints[f.name]) if dataclasses.is_dataclass(a)]
            inner = hints[f.name] if dataclasses.is_dataclass(hints[f.name]) else None
            optional = bool(kinds) and type(None) in typing.get_args(hints[f.name])
            if inner is not None or optional:
                walk(inner or kinds[0], f"{prefix}{f.name}.", inside or optional)
            elif inside and f.default is not dataclasses.MISSING:
                found[f"{prefix}{f.name}"] = f.default
            elif inside and f.default_factory is not dataclasses.MISSING:
                found[f"{prefix}{f.name}"] = f.default_factory()

    walk(Config, "", False)
    return found


def config_digest(config: Config | Mapping[str, Any]) -> str:
    text = json.dumps(trained_config(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def step_batch(batch_size: int, world_size: int, accumulate: int) -> int:
    """Graphs per optimizer step: per-process batch x processes x accumulated batches."""
    return batch_size * world_size * accumulate


def check_resume(
    config: Config, state: Mapping[str, Any], world_size: int, *, force: bool, path: Any
) -> list[tuple[int, str]]:
    """Refuse a config that would train something else; return (level, notice)s for the log.

    Raises :class:`ConfigError` naming every differing key (and the batch per optimizer step, if
    it changed), unless ``force``; then the differences come back as notices instead. A key the
    checkpoint's config lacks was added to QuantumGravPy after it was written: the run trained
    with what that key's default means, so only another value counts as a change.
    """
    saved = state["config"]
    t = per_process(config, world_size).training
    defaults = trained_config(Config())
    present = trained_config(saved)
    # the keys of an optional section (null by default) the checkpoint's section lacks
    defaults |= {
        key: value
        for key, value in optional_defaults().items()
        if any(k.startswith(key.rsplit(".", 1)[0] + ".") for k in present)
    }
    before = {**defaults, **present}
    now = {**defaults, **trained_config(config)}
    changes = [
        f"{key}: {before.get(key, '(absent)')!r} -> {now.get(key, '(absent)')!r}"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    ]
    st = saved["training"]
    old_step = step_batch(st["batch_size"], state["world_size"], st["accumulate_grad_batches"])
    new_step = step_batch(t.batch_size, world_size, t.accumulate_grad_batches)
    if old_step != new_step:
        hint = ""
        if (old_step % (world_size * t.accumulate_grad_batches)) == 0:
            keep = old_step // (world_size * t.accumulate_grad_batches)
            hint = f"; training.batch_size={keep} keeps it"
        changes.append(
            f"graphs per optimizer step (training.batch_size x processes x "
            f"training.accumulate_grad_batches): {old_step} -> {new_step}{hint}"
        )
    if changes and not force:
        raise ConfigError(
            f"{flag('resume')}: the config differs from the one {path} was trained with: "
            + "; ".join(changes)
            + f". Restore those keys, or pass {flag('force')} to continue with the changes anyway"
        )
    notices = [
        (logging.WARNING, f"resuming with changed settings ({flag('force')}): {c}") for c in changes
    ]
    versions = version_changes(state.get("environment"))
    if versions:
        notices.append(
            (
                logging.WARNING,
                f"the checkpoint was written with other versions or CPU kernels "
                f"({', '.join(versions)}): the continued run may differ from an uninterrupted "
                "one by rounding",
            )
        )
    if state["world_size"] != world_size:
        moved = f"resuming a run trained with {state['world_size']} process(es) on {world_size}"
        if STRATEGIES.get(config.parallel.strategy).invariant:
            notices.append(
                (logging.INFO, f"{moved}: parallel.strategy invariant, so it continues bit for bit")
            )
        else:
            streams = "; dropout continues from new random streams" if config.model.dropout else ""
            notices.append(
                (
                    logging.WARNING,
                    f"{moved}: the trajectory changes (gradients are added in another order, "
                    "so the weights drift apart by rounding; parallel.strategy invariant avoids "
                    "it). "
                    f"{new_step} graphs per optimizer step as before ({t.batch_size} per "
                    f"process x {world_size} x {t.accumulate_grad_batches} accumulated); the "
                    f"batch sequence is unchanged when the world-size conditions hold{streams}",
                )
            )
    return notices


# --- reading the checkpoint ----------------------------------------------------------------------


def read_resume_state(config: Config, *, world_size: int, force: bool) -> dict[str, Any] | None:
    """The checked contents of ``config``'s ``last.pt``, to continue on ``world_size`` processes.

    Returns None when the run directory holds no run, or only the start of one (no epoch
    finished): the run then starts from scratch. A directory with results but no ``last.pt``, a
    checkpoint of an older format and a config that trains something else (unless ``force``)
    are refused. The returned state has ``notices``, (level, message) pairs for the run's log.
    """
    path = config.run_dir / CHECKPOINTS / LAST
    if not path.is_file():
        check_startable(config.run_dir)
        return None
    state = load_checkpoint(path)
    if state.get("format_version") != FORMAT_VERSION or "rng" not in state:
        raise CheckpointError(
            f"{path}: written by an older version of QuantumGravPy without the state needed "
            f"to resume (format {state.get('format_version')}, needs {FORMAT_VERSION})"
        )
    state["notices"] = check_resume(config, state, world_size, force=force, path=path)
    return state


def check_resumable(config: Config, *, world_size: int, force: bool) -> None:
    """Raise the error resuming ``config`` would raise, before any data or model is built."""
    read_resume_state(config, world_size=world_size, force=force)
