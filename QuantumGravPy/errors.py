"""User-facing errors.

Everything a user can cause by what they pass in (a config, a path, a checkpoint) raises a
subclass of :class:`QGError`. The command line prints its message as one line and exits non-zero;
anything else is a bug and keeps its traceback.
"""


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
