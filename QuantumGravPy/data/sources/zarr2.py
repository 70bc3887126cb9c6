"""Arrays of Zarr format 2 stores in a local directory, decoded by numcodecs directly.

zarr-python 3 reads every array through an asynchronous pipeline whose cost does not shrink
with the array: for a QuantumGrav.jl file (a group per causal set; a causal matrix of 2,048
elements in chunks of 1,000 x 1,000, Blosc-compressed, and a label beside it) it spends about
9 ms of processor time a causal set, more than the matrix product that prepares the set.
numcodecs, the codec library zarr itself decodes with, reads the same chunks in about 2 ms.

:func:`read_array` does that for the case such files are (format 2, numbers, one compressor,
no filters, C or Fortran order) and returns None for any other, which zarr then reads. A chunk
file that is missing holds the fill value, as in zarr. An array stored through numcodecs'
pickle codec is refused before any chunk is decoded, whichever reader would read it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np

from ...errors import DataError

# numcodecs' codecs whose decoding unpickles: a chunk of them would run code from the file
RUNS_CODE = frozenset({"pickle"})


def read_array(directory: Path) -> np.ndarray | None:
    """The whole array stored in ``directory`` (holding ``.zarray``), or None where this
    reader does not cover it (no ``.zarray``, filters, other dtypes or fill values)."""
    try:
        meta = json.loads((directory / ".zarray").read_bytes())
    except FileNotFoundError:
        return None
    codecs = [meta.get("compressor"), *(meta.get("filters") or [])]
    if any(isinstance(c, dict) and c.get("id") in RUNS_CODE for c in codecs):
        raise DataError(
            f"{directory}: its chunks are stored as pickles, which are not read (reading them "
            "would run code from the file); store numbers, as QuantumGrav.jl does"
        )
    if meta.get("zarr_format") != 2 or meta.get("filters") or meta.get("order") not in ("C", "F"):
        return None
    try:
        dtype = np.dtype(meta["dtype"])
    except TypeError:
        return None
    fill = meta.get("fill_value")
    shape, chunks = tuple(meta["shape"]), tuple(meta["chunks"])
    if dtype.kind not in "biuf" or not isinstance(fill, (int, float, type(None))) or not shape:
        return None
    import numcodecs  # zarr's own dependency: present wherever zarr is

    compressor = meta.get("compressor")
    codec = numcodecs.get_codec(compressor) if compressor else None
    separator = meta.get("dimension_separator") or "."
    out = np.empty(shape, dtype)
    grid = (range(math.ceil(size / chunk)) for size, chunk in zip(shape, chunks, strict=True))
    for position in itertools.product(*grid):
        region = tuple(
            slice(k * chunk, min((k + 1) * chunk, size))
            for k, chunk, size in zip(position, chunks, shape, strict=True)
        )
        try:
            raw = (directory / separator.join(map(str, position))).read_bytes()
        except FileNotFoundError:
            out[region] = 0 if fill is None else fill
            continue
        decoded = codec.decode(raw) if codec is not None else raw
        chunk = np.frombuffer(decoded, dtype).reshape(chunks, order=meta["order"])
        out[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]
    return out


def members(directory: Path) -> list[str]:
    """The names of the groups and arrays directly in a format 2 group stored in ``directory``
    (sorted), as zarr lists them, from the directory alone: zarr-python 3 reads each member's
    metadata to list them, about a millisecond a causal set of a QuantumGrav.jl file."""
    with os.scandir(directory) as entries:
        children = [e.path for e in entries if e.is_dir() and not e.name.startswith(".")]
    return sorted(
        os.path.basename(child)
        for child in children
        if os.path.exists(os.path.join(child, ".zgroup"))
        or os.path.exists(os.path.join(child, ".zarray"))
    )
