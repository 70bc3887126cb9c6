"""Opening Zarr stores and HDF5 files of causal sets, and finding their samples and arrays.

:class:`Samples` knows a file's layout (one group per causal set, or stacked arrays with the
sample index first), how many causal sets it holds, and reads one array of one of them as
stored (unpadded). What the arrays mean is :mod:`.files`' business.
"""

from __future__ import annotations

import glob
import os
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, cause
from .formats import described, format_of, suffixes

# What a causal matrix or link matrix is called when data.relations / data.links are null.
RELATION_NAMES = ("adj", "adjacency_matrix", "causal_matrix", "relations")
LINK_NAMES = ("linkmat", "link_matrix", "links")
SIZE_NAMES = ("cset_size", "size", "n")
_GROUP = re.compile(r"cset_(\d+)")


def open_store(path: Path) -> AbstractContextManager:
    """A Zarr store or an HDF5 file (whatever format its name says), opened read-only, as a
    context manager; a clear error if it cannot be opened. Errors raised while it is open (by a
    user's ``data.reader``, say) are not relabelled."""
    return format_of(path).open(path)


def find_files(patterns: tuple[str, ...]) -> list[Path]:
    """The files ``data.files`` names, in order; each pattern must match something."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matches:
            raise DataError(f"data.files: {pattern!r} matches no file or store")
        for match in matches:
            path = Path(match)
            if path.suffix not in suffixes():
                raise DataError(f"data.files: {path} is {described()}")
            if path not in found:
                found.append(path)
    return found


def fingerprint(path: Path) -> list:
    """Size and modification time of a file, or of every file of a store (a directory)."""
    if path.is_dir():  # one stat a file: a store of thousands of causal sets holds many
        parts = []
        for folder, _, names in os.walk(path):
            for name in names:
                stat = os.stat(os.path.join(folder, name))
                relative = os.path.relpath(os.path.join(folder, name), path)
                parts.append([relative, stat.st_size, stat.st_mtime_ns])
        return sorted(parts, key=lambda part: Path(part[0]).parts)  # as before: caches hold
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


class Samples:
    """The causal sets of one open file: how many, and the arrays of each."""

    def __init__(self, store: Any, path: Path, data_cfg: Any):
        self.store, self.path, self.cfg = store, path, data_cfg
        self.format = format_of(path)
        keys = self.format.members(store, path)
        layout = data_cfg.layout
        if layout == "auto":
            layout = "groups" if any(_GROUP.fullmatch(k) for k in keys) else "stacked"
        self.layout = layout
        if layout == "groups":
            numbers = sorted(int(m.group(1)) for k in keys if (m := _GROUP.fullmatch(k)))
            if not numbers:
                raise DataError(f"{path}: no groups cset_1, cset_2, ... (it holds {keys})")
            self.groups = [f"cset_{i}" for i in numbers]
            self.count = len(self.groups)
            self.arrays = set(self.format.members(store, path, self.groups[0]))
        else:
            self.arrays = set(keys)
            self.count = None
        self.matrix, self.is_links = self._matrix_name()
        if layout == "stacked":
            shape = store[self.matrix].shape
            if len(shape) != 3 or shape[1] != shape[2]:
                raise DataError(
                    f"{path}: array {self.matrix!r} should be (samples, n, n) in the stacked "
                    f"layout, found shape {list(shape)}"
                )
            self.count = shape[0]
            self.size = data_cfg.size or next((n for n in SIZE_NAMES if n in self.arrays), None)
            if self.size is not None:
                self._require(self.size, "data.size")
                self.sizes = np.asarray(store[self.size][...]).reshape(-1).astype(np.int64)
                if len(self.sizes) != self.count:
                    raise DataError(
                        f"{path}: array {self.size!r} holds {len(self.sizes)} sizes for "
                        f"{self.count} samples"
                    )
            else:
                self.sizes = np.full(self.count, shape[1], dtype=np.int64)
        for name in (*self.cfg.targets.values(), *(self.cfg.node_features or ())):
            self._require(name, "data.targets" if name in self.cfg.targets.values() else
                          "data.node_features")  # fmt: skip

    def _require(self, name: str, key: str) -> None:
        if name not in self.arrays:
            where = f"group {self.groups[0]}" if self.layout == "groups" else "the file"
            raise DataError(
                f"{self.path}: {key} names array {name!r}, which {where} does not hold "
                f"(it holds {', '.join(sorted(self.arrays))})"
            )

    def _matrix_name(self) -> tuple[str, bool]:
        cfg = self.cfg
        if cfg.relations is not None:
            self._require(cfg.relations, "data.relations")
            return cfg.relations, False
        if cfg.links is not None:
            self._require(cfg.links, "data.links")
            return cfg.links, True
        for names, links in ((RELATION_NAMES, False), (LINK_NAMES, True)):
            for name in names:
                if name in self.arrays:
                    return name, links
        raise DataError(
            f"{self.path}: no causal matrix ({', '.join(RELATION_NAMES)}) or link matrix "
            f"({', '.join(LINK_NAMES)}); name yours with data.relations or data.links "
            f"(it holds {', '.join(sorted(self.arrays))})"
        )

    def where(self, index: int) -> str:
        return self.groups[index] if self.layout == "groups" else f"sample {index}"

    def read(self, index: int, name: str) -> np.ndarray:
        """Array ``name`` of sample ``index`` as stored (unpadded in the stacked layout)."""
        try:
            return self._read(index, name)
        except DataError:
            raise
        except (OSError, ValueError, RuntimeError) as e:
            # a truncated file or a damaged chunk: what h5py, zarr and numcodecs raise
            raise DataError(
                f"{self.path}: {self.where(index)}: {name!r} cannot be read ({cause(e)}); the "
                "file may be truncated or damaged"
            ) from e

    def _read(self, index: int, name: str) -> np.ndarray:
        if self.layout == "groups":
            array = self.format.read_fast(self.store, self.path, self.groups[index], name)
            if array is not None:
                return array
            group = self.store[self.groups[index]]
            if name not in group:
                raise DataError(f"{self.path}: {self.groups[index]} has no array {name!r}")
            return np.asarray(group[name][...])
        n = int(self.sizes[index])
        array = self.store[name]
        if name == self.matrix:
            full = np.asarray(array[index])
            if n > full.shape[0] or full[n:].any() or full[:, n:].any():
                raise DataError(
                    f"{self.path}: sample {index} of {name!r} has size {n} but holds relations "
                    f"beyond it (padding must be zero)"
                )
            return full[:n, :n]
        row = np.asarray(array[index])
        return row if row.ndim == 0 else row[:n]
