"""User-facing errors, and how their messages name the options a user can pass.

Everything a user can cause by what they pass in (a config, a path, a checkpoint) raises a
subclass of :class:`QGError`. The command line prints its message as one line and exits non-zero;
anything else is a bug and keeps its traceback.

A message that tells the user what to pass names it as they pass it: ``--overwrite`` at the
command line, ``overwrite=True`` from Python (:func:`flag`, :func:`option`). The command line
says where it is by setting :data:`COMMAND_LINE_ENV` (spawned ranks inherit it).
"""

import os

COMMAND_LINE_ENV = "QG_COMMAND_LINE"


class QGError(Exception):
    """An error caused by user input, reported without a traceback at the command line."""


class ConfigError(QGError):
    """A config file or override is invalid; the message names the dotted key."""


class CheckpointError(QGError):
    """A checkpoint file is missing, corrupt or not one of ours; the message names the file."""


class RunDirectoryError(QGError):
    """The run directory already holds a run and would be overwritten."""


class DataError(QGError):
    """A dataset cannot be built or used as configured."""


def cause(e: BaseException) -> str:
    """An exception as one line, for an error message: its type and its message's first line."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0].rstrip(':')}" if lines else type(e).__name__


def on_command_line() -> bool:
    return os.environ.get(COMMAND_LINE_ENV) == "1"


def flag(name: str) -> str:
    """A switch as the user turns it on: ``--name`` at the command line, ``name=True`` in Python."""
    return f"--{name.replace('_', '-')}" if on_command_line() else f"{name}=True"


def option(name: str, python: str | None = None) -> str:
    """An option that takes a value: ``--name`` at the command line, its keyword argument
    (``python``, by default ``name`` with underscores) in Python."""
    if on_command_line():
        return f"--{name.replace('_', '-')}"
    return python or name.replace("-", "_")
