"""Formats of data files, one class each: ``zarr`` (:mod:`.zarr_format`) and ``hdf5``
(:mod:`.hdf5_format`) of arrays, ``pt`` (:mod:`.saved_format`) of saved PyG graphs. What each
is asked is :class:`~.base.FileFormat`'s; a new format is a new module here (every module of
this package is imported, and each subclass with a ``name`` registers itself)."""

from ....registry import import_all
from .base import (
    FORMATS,
    FileFormat,
    described,
    format_of,
    reference_markdown,
    suffixes,
    writable,
)

import_all(__name__, __path__)

__all__ = [
    "FORMATS",
    "FileFormat",
    "described",
    "format_of",
    "reference_markdown",
    "suffixes",
    "writable",
]
