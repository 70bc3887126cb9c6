"""Zarr stores (``.zarr``, or any directory), read with zarr and, where a store of format 2 is
a local directory, with numcodecs directly (:mod:`..zarr2`); written in format 2, which
Zarr.jl reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ....errors import DataError, cause
from .. import zarr2
from .base import FileFormat


class Zarr(FileFormat):
    name = "zarr"
    suffixes = (".zarr",)
    title = "Zarr store"
    named = "a .zarr store"
    module = "zarr"

    def recognises(self, path: Path) -> bool:
        # a store's metadata: format 3's zarr.json, format 2's .zgroup (a store of arrays
        # alone, .zarray, is not a store of causal sets)
        return path.is_dir() and ((path / "zarr.json").is_file() or (path / ".zgroup").is_file())

    @contextlib.contextmanager
    def open(self, path: Path) -> Iterator[Any]:
        zarr = self.library()
        try:
            store = zarr.open_group(str(path), mode="r")
        except (OSError, ValueError, KeyError) as e:  # missing, not a group, bad metadata
            raise DataError(f"{path}: cannot be read as a {self.title} ({cause(e)})") from e
        yield store

    @staticmethod
    def _local(store: Any, path: Path) -> bool:
        """Whether the store is a format 2 group in a local directory (read past zarr)."""
        metadata = getattr(store, "metadata", None)
        return path.is_dir() and getattr(metadata, "zarr_format", None) == 2

    def members(self, store: Any, path: Path, group: str | None = None) -> list[str]:
        if self._local(store, path):
            return zarr2.members(path if group is None else path / group)
        return super().members(store, path, group)

    def read_fast(self, store: Any, path: Path, group: str, name: str) -> np.ndarray | None:
        if self._local(store, path):
            return zarr2.read_array(path / group / name)
        return None

    def create(self, path: Path) -> Any:
        return self.library().open_group(str(path), mode="w", zarr_format=2)

    def write(self, group: Any, name: str, array: np.ndarray) -> None:
        group.create_array(name, data=array)
