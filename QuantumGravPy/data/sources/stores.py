"""Opening data files (Zarr stores, HDF5 files, saved graphs), and finding their samples and
arrays.

:class:`Samples` knows a file's layout (one group per causal set, stacked arrays with the
sample index first, or one group per general graph), how many samples it holds, and reads one
array of one of them as stored (unpadded). A file of saved graphs (``.pt``) is the graphs
layout, its samples the graphs themselves. What the arrays mean is :mod:`.files`' business.
"""

from __future__ import annotations

import glob
import os
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from ...config import DataConfig
from ...errors import DataError, cause
from .formats import described, format_of, suffixes

# What a causal matrix or link matrix is called when data.relations / data.links are null.
RELATION_NAMES = ("adj", "adjacency_matrix", "causal_matrix", "relations")
LINK_NAMES = ("linkmat", "link_matrix", "links")
SIZE_NAMES = ("cset_size", "size", "n")
_GROUP = re.compile(r"cset_(\d+)")
_NUMBERED = re.compile(r"(.*?)(\d+)")  # a graph's group: any name ending in its number
EDGES = "edge_index"  # what makes a group a general graph's


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
                try:
                    format_of(path)  # a name that says no format: what it holds may
                except DataError:
                    raise DataError(f"data.files: {path} is {described()}") from None
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

    def __init__(self, store: Any, path: Path, data_cfg: DataConfig):
        self.store, self.path, self.cfg = store, path, data_cfg
        self.format = format_of(path)
        self.groups: list[str] | None = None
        if self.format.holds_graphs:
            self._saved_graphs()
            return
        keys = self.format.members(store, path)
        layout = data_cfg.layout
        if layout == "auto":
            layout = self._layout(keys)
        self.layout = layout
        if layout == "graphs":
            self._graph_groups(keys)
            return
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
            shape = self.format.shape(store, self.matrix)
            if len(shape) != 3 or shape[1] != shape[2]:
                raise DataError(
                    f"{path}: array {self.matrix!r} should be (samples, n, n) in the stacked "
                    f"layout, found shape {list(shape)}"
                )
            self.count = shape[0]
            self.size = data_cfg.size or next((n for n in SIZE_NAMES if n in self.arrays), None)
            if self.size is not None:
                self._require(self.size, "data.size")
                self.sizes = self.format.read(store, self.size).reshape(-1).astype(np.int64)
                if len(self.sizes) != self.count:
                    raise DataError(
                        f"{path}: array {self.size!r} holds {len(self.sizes)} sizes for "
                        f"{self.count} samples"
                    )
            else:
                self.sizes = np.full(self.count, shape[1], dtype=np.int64)
        for name in (*self.cfg.targets.values(), *(self.cfg.node_features or ())):
            self._require(
                name, "data.targets" if name in self.cfg.targets.values() else "data.node_features"
            )

    def _layout(self, keys: list[str]) -> str:
        """``data.layout: auto``: graphs when the first numbered group holds ``edge_index``,
        else a group per causal set when there are ``cset_N`` groups, else stacked arrays."""
        numbered = sorted((k for k in keys if _NUMBERED.fullmatch(k)), key=_number)
        if numbered and EDGES not in keys and self.format.is_group(self.store, numbered[0]):
            if EDGES in self.format.members(self.store, self.path, numbered[0]):
                return "graphs"
        return "groups" if any(_GROUP.fullmatch(k) for k in keys) else "stacked"

    def _graph_groups(self, keys: list[str]) -> None:
        """The graphs layout of an array file: a group per graph, named by a prefix and a
        number (``graph_1``, ``g7``, ``12``), in the order of the numbers."""
        found = [(int(m.group(2)), m.group(1), k) for k in keys if (m := _NUMBERED.fullmatch(k))]
        prefixes = sorted({prefix for _, prefix, _ in found})
        if not found:
            raise DataError(
                f"{self.path}: data.layout is graphs, but it holds no groups graph_1, graph_2, "
                f"... (it holds {', '.join(keys) or 'nothing'})"
            )
        if len(prefixes) > 1:
            raise DataError(
                f"{self.path}: the groups of graphs must be named alike, a name and a number "
                f"(graph_1, graph_2, ...); found {', '.join(repr(p + 'N') for p in prefixes)}"
            )
        self.groups = [k for _, _, k in sorted(found)]
        self.count = len(self.groups)
        self.arrays = set(self.format.members(self.store, self.path, self.groups[0]))
        self._graph_checks()

    def _saved_graphs(self) -> None:
        """A file of saved graphs: its graphs are the samples, their attributes the arrays."""
        if self.cfg.layout not in ("auto", "graphs"):
            raise DataError(
                f"{self.path}: data.layout is {self.cfg.layout}, but a {self.format.title} holds "
                "graphs (data.layout: auto or graphs)"
            )
        self.layout = "graphs"
        self.count = self.format.graph_count(self.store)
        self.arrays = set(self.format.graph(self.store, 0))
        self._graph_checks()

    def _graph_checks(self) -> None:
        """What a file of general graphs must hold, and the keys that do not apply to it."""
        for key in ("relations", "links", "size"):
            if getattr(self.cfg, key) is not None:
                raise DataError(
                    f"{self.path}: data.{key} names an array of causal sets, but the file holds "
                    f"general graphs (edge_index per graph); remove data.{key}"
                )
        self._require(EDGES, "a graph")
        for name in (*self.cfg.targets.values(), *(self.cfg.node_features or ())):
            self._require(
                name, "data.targets" if name in self.cfg.targets.values() else "data.node_features"
            )
        if "x" not in self.arrays and not self.cfg.node_features:
            where = f"group {self.groups[0]}" if self.groups else "the first graph"
            raise DataError(
                f"{self.path}: {where} has no node features: store them as x (nodes x features) "
                "or name per-node arrays with data.node_features"
            )

    def _require(self, name: str, key: str) -> None:
        if name not in self.arrays:
            where = "the file" if self.layout == "stacked" else "the first graph"
            where = f"group {self.groups[0]}" if self.groups else where
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
        if self.groups is not None:
            return self.groups[index]
        return f"graph {index}" if self.layout == "graphs" else f"sample {index}"

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
        if self.groups is not None:
            array = self.format.read_fast(self.store, self.path, self.groups[index], name)
            if array is not None:
                return array
            group = self.groups[index]
            try:
                return self.format.read(self.store, name, group=group)
            except KeyError:  # what a member missing by name raises (h5py's, zarr's groups)
                raise DataError(f"{self.path}: {group} has no array {name!r}") from None
        n = int(self.sizes[index])
        if name == self.matrix:
            full = self.format.read(self.store, name, index=index)
            if n > full.shape[0] or full[n:].any() or full[:, n:].any():
                raise DataError(
                    f"{self.path}: sample {index} of {name!r} has size {n} but holds relations "
                    f"beyond it (padding must be zero)"
                )
            return full[:n, :n]
        row = self.format.read(self.store, name, index=index)
        return row if row.ndim == 0 else row[:n]


def _number(key: str) -> int:
    """The number a group's name ends in (groups without one last)."""
    m = _NUMBERED.fullmatch(key)
    return int(m.group(2)) if m else 1 << 62
