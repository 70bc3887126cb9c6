"""Writing causal sets as QuantumGrav.jl does: one group per causal set, Julia's orientation.

``qg generate CONFIG --output PATH`` uses :func:`write_embedded`; what is written reads back
through :mod:`.files` as exactly the graphs it came from.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ... import logs
from ...config import DataConfig
from ...errors import ConfigError, DataError
from ...physics import causal_structure
from .causal_sets import generate_causal_set_graphs
from .formats import FORMATS, described, writable


def write_causal_sets(
    path: str | Path,
    graphs: Iterator[tuple[Data, torch.Tensor, torch.Tensor]],
    *,
    file_format: str,
    total: int | None = None,
    progress: bool = True,
    attributes: dict[str, str] | None = None,
) -> Path:
    """Write causal sets in the one-group-per-causal-set layout, in Julia's orientation.

    ``graphs`` yields (graph, relations, links): each becomes group ``cset_<i>`` (from 1)
    holding ``adj`` and ``linkmat`` (uint8, stored transposed, as Julia's column-major arrays
    are), every per-element attribute of the graph but ``x``/``pos`` as a vector, and every
    graph-level one as a 1-element array; ``attributes``, strings, on the root group.
    Streaming: one causal set in memory at a time. The store is written under a temporary name
    and renamed when complete.
    """
    path = Path(path)
    fmt = _writer(file_format)
    if path.exists():
        raise DataError(f"--output: {path} exists; choose another path or remove it")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    root = fmt.create(tmp)
    try:
        for name, text in (attributes or {}).items():
            fmt.describe(root, name, text)
        for i, (graph, relations, links) in enumerate(
            logs.progress(graphs, total=total, desc="writing", unit="causal set", enabled=progress),
            start=1,
        ):
            group = fmt.group(root, f"cset_{i}")
            fmt.write(group, "adj", relations.t().numpy().astype(np.uint8))
            fmt.write(group, "linkmat", links.t().numpy().astype(np.uint8))
            for key in graph.keys():
                if key in ("x", "pos", "edge_index"):
                    continue
                fmt.write(group, key, np.asarray(graph[key]).reshape(-1))
        fmt.close(root)
        os.replace(tmp, path)
    except BaseException:
        fmt.close(root)
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    return path


def _writer(name: str) -> Any:
    """The format ``--format`` names, among those written (files of graphs are only read)."""
    writers = {cls.name: cls for cls in writable()}
    if name in writers:
        return writers[name]()
    known = ", ".join(writers)
    if name in {cls.name for cls in FORMATS}:
        raise ConfigError(f"--format: {name} files are read, not written; write {known}")
    close = difflib.get_close_matches(str(name), writers, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ConfigError(f"--format: unknown {name!r} (known: {known}){hint}")


def writer_for(output: Path, *, hint: str = "") -> str:
    """The name of the written format whose files ``output`` is named as (by its suffix)."""
    named = [cls.name for cls in writable() if cls().claims(Path(output))]
    if not named:
        raise DataError(f"--output: {output} is {described(written=True)}{hint}")
    return named[0]


def write_embedded(
    data_cfg: DataConfig, output: str | Path, *, file_format: str | None = None, chunk: int = 256
) -> Path:
    """The embedded causal sets of ``data_cfg`` written to ``output`` (:func:`write_causal_sets`),
    generated ``chunk`` at a time, so a large dataset never sits in memory whole."""
    output = Path(output)
    if file_format is None:
        file_format = writer_for(output, hint="; name the format with --format")

    def causal_sets() -> Iterator[tuple[Data, torch.Tensor, torch.Tensor]]:
        for start in range(0, data_cfg.num_graphs, chunk):
            end = min(start + chunk, data_cfg.num_graphs)
            for graph in generate_causal_set_graphs(
                start,
                end,
                num_points=data_cfg.num_points,
                dimensions=data_cfg.dimensions,
                seed=data_cfg.seed,
                progress=False,
            ):
                relations, links = causal_structure(graph.pos[None])
                yield graph, relations[0], links[0]

    return write_causal_sets(
        output, causal_sets(), file_format=file_format, total=data_cfg.num_graphs
    )
