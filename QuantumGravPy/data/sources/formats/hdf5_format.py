"""HDF5 files (``.h5``, ``.hdf5``), read and written with h5py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ....errors import DataError, cause
from .base import FileFormat

# The Python file each file being written goes through, by the id of h5py's object for it.
_WRITING: dict[int, Any] = {}


class HDF5(FileFormat):
    name = "hdf5"
    suffixes = (".h5", ".hdf5")
    title = "HDF5 file"
    named = "an .h5/.hdf5 file"
    module = "h5py"

    def recognises(self, path: Path) -> bool:
        # HDF5's signature, at the file's start (where a file of it written by HDF5 puts it)
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(8) == b"\x89HDF\r\n\x1a\n"

    def open(self, path: Path) -> Any:
        h5py = self.library()
        try:
            return h5py.File(path, "r")  # closes itself at the end of a with block
        except OSError as e:  # not HDF5, truncated, or locked by a writer
            raise DataError(f"{path}: cannot be read as an {self.title} ({cause(e)})") from e

    def create(self, path: Path) -> Any:
        # Through a Python file: a full device is then an OSError (ENOSPC) at the write that
        # found it, where HDF5's own driver crashes the process at close.
        handle = open(path, "w+b")  # closed with the file, in close()
        try:
            root = self.library().File(handle, "w")
        except BaseException:
            handle.close()
            raise
        _WRITING[id(root)] = handle
        return root

    def write(self, group: Any, name: str, array: np.ndarray) -> None:
        group.create_dataset(name, data=array)

    def close(self, root: Any) -> None:
        handle = _WRITING.pop(id(root), None)
        try:
            root.close()
        finally:
            if handle is not None:
                handle.close()
