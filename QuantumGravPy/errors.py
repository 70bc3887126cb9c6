"""User-facing errors, and how their messages name the options a user can pass.

Everything a user can cause by what they pass in (a config, a path, a checkpoint) raises a
subclass of :class:`QGError`. The command line prints its message as one line and exits non-zero;
anything else is a bug and keeps its traceback.

A message that tells the user what to pass names it as they pass it: ``--overwrite`` at the
command line, ``overwrite=True`` from Python (:func:`flag`, :func:`option`). The command line
says where it is by setting :data:`COMMAND_LINE_ENV` (spawned ranks inherit it).
"""

import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

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


class RunError(Exception):
    """A run stopped by what is not a mistake in what the user passed: an exception raised in
    the user's own code (a model, a ``data.reader``), memory running out, a library failing.
    Its message says what happened and where, in one line, which the command line prints
    (exit status 1); the original exception is its ``__cause__``, whose traceback ``--debug``
    shows (``traceback``: that of a rank that failed in another process, as text)."""

    def __init__(self, message: str, *, traceback: str | None = None):
        super().__init__(message)
        self.traceback = traceback


# Where the code that is not the user's lives: this package, the standard library and every
# folder packages are installed into (the environment's, the user's own site with pip --user,
# a distribution's dist-packages). A package of the user's own that is installed there counts
# as a library.
_NOT_USERS = tuple(
    Path(p).resolve()
    for p in {
        str(Path(__file__).parent),
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        *site.getsitepackages(),
        site.getusersitepackages(),
        *(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))),
    }
)


def user_frame(error: BaseException) -> str | None:
    """Where in the user's own code (a file outside this package, the standard library and the
    installed packages) ``error`` was raised, or passed through last: ``file.py:12, in
    Class.method``; None if nowhere."""
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        name = frame.f_code.co_filename
        # code a library generated at run time (torch_geometric's propagate, torch.compile's)
        # lies in a temporary folder, but belongs to the library its module is named after
        package = sys.modules.get(str(frame.f_globals.get("__name__", "")).split(".")[0])
        if (
            not name.startswith("<")
            and not _library(name)
            and not _library(getattr(package, "__file__", None))
        ):
            found = f"{Path(name).name}:{line}, in {frame.f_code.co_qualname}"
    return found


def _library(file: str | None) -> bool:
    path = Path(file).resolve() if file else None
    return path is not None and any(path.is_relative_to(root) for root in _NOT_USERS)


def in_user_code(error: BaseException, doing: str) -> RunError | None:
    """``error``, raised while ``doing`` (``"in data.reader user_data.read('a.h5', 3)"``), as a
    :class:`RunError` naming the line of the user's code it came from; None if it did not come
    from the user's code. Raise it ``from error``."""
    where = user_frame(error)
    return None if where is None else RunError(f"{cause(error)} ({where}) {doing}")


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


def require(
    module: str,
    *,
    needed_for: str,
    extra: str,
    names: tuple[str, ...] = (),
    library: str | None = None,
) -> Any:
    """Import ``module`` (``"zarr"``); if it, or one of ``names`` it imports, is not installed, a
    ConfigError saying that ``needed_for`` (``"tracking.wandb"``) needs the ``extra`` (which
    brings ``library``). A module that is installed but fails to import is not relabelled: its
    error is what happened."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name not in (module, module.split(".")[0], *names):
            raise
        brings = f" ({library})" if library else ""
        raise ConfigError(
            f"{needed_for} needs the '{extra}' extra{brings}: pip install 'QuantumGravPy[{extra}]'"
        ) from None  # what to install is all there is to say
