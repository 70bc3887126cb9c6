"""Which ranks share a folder: found by sharing something, not by comparing host names.

Rank 0 writes a random token into the folder and every rank reads it back. Two containers, or
two nodes configured alike, may have the same host name and still not share ``/dev/shm`` or a
disk; a cluster's home and scratch file systems are shared by nodes of different names.
"""

from __future__ import annotations

import os
import uuid

from . import distributed


def everyone_sees(folder: str | os.PathLike, *, here: bool = True) -> bool:
    """Whether every rank of the job sees the same ``folder`` as rank 0 (made if missing).
    ``here``: this rank can use the folder at all (False votes no). A collective: every rank
    must call it; True in a single process."""
    if not distributed.is_initialized() or distributed.get_world_size() == 1:
        return here
    token = None
    written = None
    if distributed.get_rank() == 0 and here:
        token = uuid.uuid4().hex
        try:
            os.makedirs(folder, exist_ok=True)
            written = os.path.join(folder, f".qg_token_{token}")
            with open(written, "w") as f:
                f.write(token)
        except OSError:
            token = written = None
    try:
        token = distributed.broadcast_object(token)  # after the write: every rank may read it
        votes = distributed.all_gather_object(here and token is not None and _reads(folder, token))
    finally:
        if written is not None:
            os.unlink(written)  # every rank has voted, so has read it
    return all(votes)


def _reads(folder: str | os.PathLike, token: str) -> bool:
    try:
        with open(os.path.join(folder, f".qg_token_{token}")) as f:
            return f.read() == token
    except OSError:
        return False
