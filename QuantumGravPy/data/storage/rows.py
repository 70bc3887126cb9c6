"""One graph as bytes: the form :mod:`.disk` keeps each graph in, one row of its table.

A row is a table of numbers, a JSON header, then each tensor's raw bytes, aligned so that they
can be viewed in place. :func:`unpack` reads one graph; the numbers at the start of each row are
what :class:`~..batches.row_batches.DiskBatcher` assembles a batch from, with no header read.
Nothing in a row is unpickled: a row planted in a shared ``data.root`` is refused, never run.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ...errors import DataError

_ALIGN = 8
FIXED, PER_TENSOR = 3, 3  # integers at the start of a row, and per tensor (see pack)
FORMAT = 3  # of a row; in a table's file name, so that a table of another is never read
# 3: the header is JSON (2 pickled it)


def _signature(specs: list[tuple], other: dict) -> int:
    """A number equal for graphs whose attributes have the same names, dtypes and numbers of
    dimensions (a 64-bit digest: two different structures share one by a chance of 2^-64)."""
    structure = repr(([(*spec[:2], len(spec[2])) for spec in specs], sorted(other)))
    return int.from_bytes(
        hashlib.blake2b(structure.encode(), digest_size=8).digest(), "little", signed=True
    )


def pack(graph: Data) -> bytes:
    """A graph as bytes, in three parts, each starting at a multiple of 8 bytes:

    - a table of 64-bit integers: the number of tensors, the structure's :func:`_signature`,
      the header's length, then per tensor where its bytes start in the row and its sizes
      along its first and its last axis (what a batch is assembled from, read for all of a
      batch's graphs with one gather);
    - a JSON header: names, dtypes, shapes and where each tensor's bytes start, and the
      attributes that are not tensors (numbers, strings, lists and dicts of them);
    - each tensor's raw bytes, aligned so that they can be viewed in place when read.
    """
    specs, other, chunks, offset = [], {}, [], 0
    for key, value in graph.items():
        if not isinstance(value, torch.Tensor):
            other[key] = value
            continue
        flat = value.detach().cpu().contiguous().reshape(-1)
        if flat.numel() and flat.stride(0) != 1:  # one element may keep its stride (a matrix
            # column's), which .contiguous() leaves as it is and .view refuses: copied
            flat = torch.empty(flat.numel(), dtype=flat.dtype).copy_(flat)
        raw = flat.view(torch.uint8).numpy().tobytes()
        pad = -len(raw) % _ALIGN
        specs.append((key, str(value.dtype).removeprefix("torch."), tuple(value.shape), offset))
        chunks.append(raw + bytes(pad))
        offset += len(raw) + pad
    try:
        header = json.dumps([specs, other], default=_plain).encode()
    except TypeError as e:
        raise DataError(
            f"data.storage: disk keeps a graph's attributes that are not tensors as numbers, "
            f"strings, lists and dicts of them; {e}"
        ) from None
    fixed = 8 * (FIXED + PER_TENSOR * len(specs))
    start = fixed + len(header) + (-(fixed + len(header)) % _ALIGN)
    table = [len(specs), _signature(specs, other), len(header)]
    for _, _, shape, at in specs:
        table += [start + at, shape[0] if shape else 1, shape[-1] if shape else 1]
    head = np.array(table, dtype="<i8").tobytes() + header
    return head + bytes(start - len(head)) + b"".join(chunks)


def _plain(value: Any) -> Any:
    """A numpy number as Python's; anything else JSON does not know is refused by name."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"one is a {type(value).__name__}")


def header(blob: bytes) -> tuple[list, dict, int]:
    """(tensor specs, other attributes, where the tensors' bytes start) of :func:`pack`'s bytes;
    a :class:`DataError` for bytes :func:`pack` did not make."""
    try:
        count, _, size = struct.unpack_from("<3q", blob)
        first = 8 * (FIXED + PER_TENSOR * count)
        specs, other = json.loads(blob[first : first + size])
        specs = [(key, _dtype(name), tuple(shape), int(at)) for key, name, shape, at in specs]
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as e:
        raise DataError(f"a stored graph is not one this library wrote ({e})") from None
    return specs, dict(other), first + size + (-(first + size) % _ALIGN)


def _dtype(name: str) -> str:
    """``name`` if it names a torch dtype (what :func:`pack` writes), else a ValueError."""
    if not isinstance(getattr(torch, str(name), None), torch.dtype):
        raise ValueError(f"{name!r} is no dtype")
    return name


def unpack(blob: bytes) -> Data:
    """The graph :func:`pack` made; its tensors are views of ``blob``, which nothing else
    holds (a fresh row from the table), so no byte is copied."""
    specs, other, start = header(blob)
    attributes = dict(other)
    for key, dtype_name, shape, offset in specs:
        dtype = getattr(torch, dtype_name)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            attributes[key] = torch.empty(shape, dtype=dtype)
            continue
        # (bytes are read-only to Python, not to torch: _Table silences torch's warning)
        raw = torch.frombuffer(blob, dtype=torch.uint8, count=nbytes, offset=start + offset)
        attributes[key] = raw.view(dtype).view(shape)
    return Data(**attributes)
