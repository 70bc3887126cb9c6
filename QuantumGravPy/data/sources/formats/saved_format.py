"""Graphs saved with ``torch.save`` (``.pt``, ``.pth``): a list of ``Data`` or an
``InMemoryDataset``'s file, as PyTorch Geometric users keep them
(:mod:`...storage.saved_graphs`).

A file of this format holds whole graphs, not arrays: it is read as the graphs layout and never
written by ``qg generate``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ...storage.saved_graphs import load_graphs
from .base import FileFormat


class SavedGraphs(FileFormat):
    name = "pt"
    suffixes = (".pt", ".pth")
    title = "file of saved graphs"
    named = "a .pt file of saved graphs"
    module = "torch"
    holds_graphs = True

    def open(self, path: Path) -> Any:
        return contextlib.nullcontext(load_graphs(path))
