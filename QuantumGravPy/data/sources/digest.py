"""Whether every rank of a job holds the same graphs: a digest of a dataset, compared.

A ``data.dataset`` function runs in every rank of a job. One that shuffles without a seed, or
lists a directory in the order the file system returns, gives each rank its own order; the
splits are taken by position, so each rank would train, validate and test on other graphs than
the others, and one rank's test graphs would be trained on by another, with nothing to see in
the metrics. :func:`check_same_on_every_rank` compares a digest of each rank's dataset with
rank 0's before anything is split, and refuses a difference naming the rank and the first graph
that differs.

The digest covers every graph of a list or of a dataset held in memory (each tensor's dtype,
shape and bytes, in order); of a dataset read from disk one graph at a time, :data:`SAMPLE`
graphs evenly spaced over it (the first and the last among them), so that checking does not
read the whole of a large dataset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...errors import DataError

SAMPLE = 2048  # graphs of a dataset on disk that its digest reads
FIRST = 10_000  # graphs compared one by one to name the first that differs


def graph_digest(graph: Any) -> bytes:
    """16 bytes that change with any tensor, number or string attribute of ``graph``: its
    name, dtype, shape or value (other objects count by their type alone)."""
    h = hashlib.blake2b(digest_size=16)
    for key, value in sorted(graph.to_dict().items()):
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            h.update(f"{value.dtype}{tuple(value.shape)}".encode())
            flat = value.detach().cpu().contiguous().reshape(-1)
            h.update(flat.view(torch.uint8).numpy())  # hashed in place, not copied
        elif isinstance(value, (bool, int, float, str, bytes)) or value is None:
            h.update(repr(value).encode())
        else:  # an object's repr may hold its address, a set's order the process's hash seed
            h.update(type(value).__name__.encode())
    return h.digest()


def positions(dataset: Any) -> Sequence[int]:
    """The graphs the digest reads: all of them where they are in memory, else a sample."""
    n = len(dataset)
    in_memory = isinstance(dataset, list) or hasattr(dataset, "slices")
    if in_memory or n <= SAMPLE:
        return range(n)
    return sorted({round(i * (n - 1) / (SAMPLE - 1)) for i in range(SAMPLE)})


def digest(dataset: Any) -> tuple[int, bytes]:
    """The number of graphs and one digest of those :func:`positions` names, in order."""
    h = hashlib.blake2b(digest_size=16)
    for i in positions(dataset):
        h.update(graph_digest(dataset[i]))
    return len(dataset), h.digest()


def check_same_on_every_rank(
    dataset: Any, mine: tuple[int, bytes], *, source: str, gather: Callable[[Any], list[Any]]
) -> None:
    """Raise :class:`~QuantumGravPy.errors.DataError` on every rank unless every rank's
    ``dataset`` has rank 0's digest; ``mine``: this rank's :func:`digest` (worked out before,
    where a failure reaches every rank). ``gather(obj)``: every rank's ``obj``, in rank order
    (a collective: every rank calls this). ``source`` names where the graphs came from."""
    every = gather(mine)
    odd = next((r for r, d in enumerate(every) if d != every[0]), None)
    if odd is None:
        return
    (n0, _), (n, _) = every[0], every[odd]
    # One by one, to say which graph: the first graphs' digests of every rank.
    shown = [p for p in positions(dataset)][:FIRST]
    graphs = gather([graph_digest(dataset[i]) for i in shown] if n == n0 else None)
    if n != n0:
        what = f"{n0} graphs on rank 0, {n} on rank {odd}"
    else:
        first = next(
            (i for i, a, b in zip(shown, graphs[0], graphs[odd], strict=True) if a != b), None
        )
        what = (
            f"graph {first} differs" if first is not None else f"a graph after {shown[-1]} differs"
        )
    raise DataError(
        f"{source} gave rank {odd} other graphs than rank 0 ({what}): every rank calls it, "
        "and the splits are taken by position, so it must return the same graphs in the same "
        "order on every rank; seed any shuffle (random.Random(0).shuffle(graphs)) and sort "
        "what you list from a directory"
    )
