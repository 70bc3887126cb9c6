"""Logging for the package: one stderr handler, plus the run directory's ``train.log``."""

from __future__ import annotations

import logging
from pathlib import Path

LOGGER_NAME = "QuantumGravPy"
_FORMAT = "%(asctime)s {prefix}%(levelname)s %(message)s"
_DATEFMT = "%H:%M:%S"
_STDERR_HANDLER: logging.Handler | None = None


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def configure_logging(level: str | int = "INFO", *, prefix: str = "") -> logging.Logger:
    """Send the package's records to stderr at ``level``; calling again replaces the handler."""
    global _STDERR_HANDLER
    logger = get_logger()
    if _STDERR_HANDLER is not None:
        logger.removeHandler(_STDERR_HANDLER)
    _STDERR_HANDLER = logging.StreamHandler()
    _STDERR_HANDLER.setFormatter(logging.Formatter(_FORMAT.format(prefix=prefix), _DATEFMT))
    logger.addHandler(_STDERR_HANDLER)
    logger.setLevel(level)
    logger.propagate = False  # the root logger's handlers would print every line twice
    return logger


def add_file_handler(path: Path, *, prefix: str = "") -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT.format(prefix=prefix), "%Y-%m-%d %H:%M:%S"))
    get_logger().addHandler(handler)
    return handler


def append_to_log(path: Path, message: str, *, level: int = logging.ERROR) -> None:
    """Add one record to the log file ``path``, if there is one, and nowhere else."""
    if not path.is_file():
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT.format(prefix=""), "%Y-%m-%d %H:%M:%S"))
    try:
        handler.handle(get_logger().makeRecord(LOGGER_NAME, level, __file__, 0, message, (), None))
    finally:
        handler.close()


def set_terminal_level(level: str | int) -> None:
    """Show only records of ``level`` and above on stderr (files keep the logger's level)."""
    if _STDERR_HANDLER is not None:
        _STDERR_HANDLER.setLevel(level)
