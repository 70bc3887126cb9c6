"""User-facing errors, and how their messages name the options a user can pass.

Everything a user can cause by what they pass in (a config, a path, a checkpoint) raises a
subclass of :class:`QGError`. The command line prints its message as one line and exits non-zero;
anything else is a bug and keeps its traceback.

A message that tells the user what to pass names it as they pass it: ``--overwrite`` at the
command line, ``overwrite=True`` from Python (:func:`flag`, :func:`option`). The command line
says where it is by setting :data:`COMMAND_LINE_ENV` (spawned ranks inherit it).
"""

import errno
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


class DiskFullError(RunError):
    """A file could not be written because its device is full (or the user's quota is spent).
    Not a mistake in what the user passed: the message names the file being written and what
    is kept (``kept``, once known), and the run continues with ``--resume`` once there is room."""

    def __init__(self, message: str, *, kept: str | None = None, traceback: str | None = None):
        super().__init__(f"{message}; {kept}" if kept else message, traceback=traceback)
        self.kept = kept


class OutageError(RunError):
    """A server the run talks to (a tracking server, a study's database) cannot be reached or
    failed: not a mistake in the config, which names it correctly. The message names the
    server and what it answered; the original exception is the ``__cause__``."""


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an exception it came from, is a write to a full device."""
    return any(isinstance(e, OSError) and e.errno in _DISK_FULL for e in _chain(error))


# Exceptions that mean a server did not answer, by class name along the chain of causes, so
# that no client library (requests, urllib3, SQLAlchemy, W&B) needs importing to tell.
_UNREACHABLE = (
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "ConnectTimeout",
    "MaxRetryError",
    "NewConnectionError",
    "ReadTimeout",
    "Timeout",
    "TimeoutError",
    "CommError",
    "ServerError",
    "RetryError",
)
_UNREACHABLE_TEXT = (
    "connection refused",
    "max retries exceeded",
    "could not connect",
    "connection reset",
    "timed out",
    "temporary failure in name resolution",
    "no route to host",
    "network is unreachable",
    "server closed the connection",
    "internal server error",
    "service unavailable",
    "bad gateway",
)
# What a server answered that is the request's fault (a password, a certificate, a proxy the
# user set, a name that resolves nowhere): never an outage, whatever class it comes in.
_REFUSED = (
    "AuthenticationError",
    "AuthError",
    "SSLError",
    "ProxyError",
    "UsageError",
    "PermissionError",
    "NameResolutionError",
    "InvalidURL",
    "InvalidSchema",
    "ArgumentError",
)
_REFUSED_TEXT = (
    "name or service not known",
    "nodename nor servname",
    "permission denied",
    "authentication failed",
    "password authentication",
    "unauthorized",
    "forbidden",
)


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or what it came from) says a server could not be reached or failed,
    rather than that the request was wrong."""
    chain = list(_chain(error))
    for e in chain:
        if any(cls.__name__ in _REFUSED for cls in type(e).__mro__):
            return False
        if any(text in str(e).lower() for text in _REFUSED_TEXT):
            return False
    for e in chain:
        if any(cls.__name__ in _UNREACHABLE for cls in type(e).__mro__):
            return True
        if isinstance(e, OSError) and e.errno in (
            errno.ECONNREFUSED,
            errno.ECONNRESET,
            errno.EHOSTUNREACH,
            errno.ENETUNREACH,
            errno.ETIMEDOUT,
        ):
            return True
        if any(text in str(e).lower() for text in _UNREACHABLE_TEXT):
            return True
    return False


def _chain(error: BaseException):
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)


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


def refused_global(error: BaseException) -> str:
    """`` (module.Name)``: the object a ``torch.load(weights_only=True)`` refused to build, as
    its error names it; empty where it names none."""
    text = str(error)
    if "Unsupported global" not in text:
        return ""
    return f" ({text.split('Unsupported global: GLOBAL ')[-1].split(' ')[0]})"


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
