"""W&B's offline run files, read back (written for wandb 0.20-0.31).

A resumed run asks which epochs an offline W&B run holds already. W&B keeps them in its
``.wandb`` files, in its own framing (LevelDB's log format) of its own protobuf records, and
has no public reader of them (its Python reader was removed when its core moved to Go): the
framing is read here, and the records parsed with the protobuf classes W&B ships.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import moved

DISTRIBUTION = "wandb"

_BLOCK = 32768  # W&B's records are framed as LevelDB's log: 32 kB blocks
_HEADER = 7  # the file's: ":W&B", a magic number and a version; each record's: crc, length, kind


def _records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, in order; a torn last record (a killed writer) is
    left out."""
    data = path.read_bytes()
    position, part = _HEADER, b""
    while position + _HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _HEADER:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + _HEADER])
        if kind == 0:  # zeros: the rest of the block was never written
            position += left
            continue
        payload = data[position + _HEADER : position + _HEADER + length]
        if len(payload) < length:
            return
        position += _HEADER + length
        if kind == 1:  # whole
            yield payload
        elif kind == 2:  # first part
            part = payload
        elif kind == 3:  # middle
            part += payload
        elif kind == 4:  # last
            yield part + payload


def offline_history(files: Path, run_id: str) -> list[dict[str, Any]]:
    """Every history row of W&B run ``run_id`` in the offline files in ``files`` (W&B's own
    folder, ``RUN_DIR/wandb/``: one folder per start or resume), in the order they were
    written."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    rows = []
    folders = sorted(files.glob(f"offline-run-*-{run_id}"))
    for path in (p / f"run-{run_id}.wandb" for p in folders):
        if not path.is_file():
            continue
        for data in _records(path):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(data)
            except DecodeError:  # a damaged record: what follows may still be read
                continue
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
    return rows


def check() -> None:
    """The record classes W&B ships, and their history rows, where this reader looks."""
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError as e:
        raise moved(DISTRIBUTION, f"wandb.proto.wandb_internal_pb2 is gone ({e})") from None
    record = wandb_internal_pb2.Record()
    item = record.history.item.add()
    item.key, item.value_json = "epoch", "1"
    parsed = wandb_internal_pb2.Record.FromString(record.SerializeToString())
    if parsed.WhichOneof("record_type") != "history" or parsed.history.item[0].key != "epoch":
        raise moved(DISTRIBUTION, "a Record no longer holds history rows as history.item")
