"""Datasets processed once and cached in one file named by a digest of what they depend on.

Both the generated causal sets and those read from files are such a cache: a change to any
parameter names another file, so a stale cache is never reused, and the file is written under a
temporary name and renamed, so an interrupted build leaves nothing a later run would load.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from torch_geometric.data import Data, InMemoryDataset


def digest(params: dict[str, Any]) -> str:
    """A short name for ``params`` (plain JSON values): equal exactly when they are."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]


class DigestCachedDataset(InMemoryDataset):
    """An ``InMemoryDataset`` whose ``root/processed/<prefix>_<digest>.pt`` holds the graphs
    :meth:`build` returns; ``digest`` hashes ``params`` (plain JSON values)."""

    prefix = "graphs"

    def __init__(self, root: str, params: dict[str, Any], *, transform: Callable | None = None):
        self.params = params
        super().__init__(root, transform=transform, log=False)
        self.load(self.processed_paths[0])

    @property
    def digest(self) -> str:
        return digest(self.params)

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{self.prefix}_{self.digest}.pt"]

    def download(self) -> None:  # nothing to fetch: the graphs are built locally
        pass

    def build(self) -> list[Data]:
        """The graphs to cache (subclasses)."""
        raise NotImplementedError

    def process(self) -> None:
        graphs = self.build()
        tmp = self.processed_paths[0] + f".tmp{os.getpid()}"
        self.save(graphs, tmp)
        os.replace(tmp, self.processed_paths[0])
