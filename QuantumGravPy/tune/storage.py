"""Where a study keeps its trials: a journal file by default, or any URL Optuna accepts.

- a path (the default: ``STUDY_DIR/study.journal``): Optuna's journal file, appended to under
  a lock; several processes on one machine, or jobs on a cluster file system, share it;
- ``postgresql://...``, ``mysql://...``: a database server, for many jobs on a cluster;
- ``redis://...``: Optuna's journal in Redis;
- ``sqlite:///...``: a single file database. Its locking is unreliable on network file systems
  (NFS, Lustre, GPFS, ...), so such a URL pointing into one gets a warning; use the journal
  file there.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError, OutageError, option, unreachable
from ..logs import get_logger

JOURNAL = "study.journal"
# File systems whose byte-range locks SQLite cannot trust across machines.
SHARED_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "cifs",
    "smb3",
    "smbfs",
    "beegfs",
    "ceph",
    "fuse.sshfs",
    "glusterfs",
    "fuse.glusterfs",
    "panfs",
    "fuse.gcsfuse",
)


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


def open_storage(spec: str) -> Any:
    """The Optuna storage ``spec`` names (a journal file path or a URL); ConfigError naming it
    when it cannot be opened or reached."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalRedisBackend

    shown = f"{option('storage')} {redact(spec)}"
    try:
        if "://" not in spec:
            path = Path(spec)
            if not path.parent.is_dir():
                raise ConfigError(f"{shown}: the folder {path.parent} does not exist")
            return JournalStorage(journal_backend(path))
        if spec.startswith("redis://"):
            return JournalStorage(JournalRedisBackend(spec))
        if spec.startswith("sqlite:"):
            warn_if_shared(spec)
        return _database(spec)
    except ConfigError:
        raise
    except ModuleNotFoundError as e:
        extra = (
            " (the 'tune' extra has it: pip install 'QuantumGravPy[tune]')"
            if (e.name or "").startswith("psycopg")
            else ""
        )
        raise ConfigError(
            f"{shown}: needs the Python package {e.name!r} (its database driver); "
            f"pip install {_PACKAGES.get(e.name, e.name)}{extra}"
        ) from None
    except Exception as e:  # SQLAlchemy, Redis and OS errors: the storage is not usable
        detail = " ".join(str(e).split("\n")[0].split()) or type(e).__name__
        if unreachable(e):  # the database server, not the URL
            raise OutageError(
                f"{shown}: the study's database server cannot be reached or failed: {detail}"
            ) from e
        raise ConfigError(f"{shown}: cannot open the study storage: {detail}") from e


def journal_backend(path: Path) -> Any:
    """Optuna's journal file at ``path``, written so that a record cut short (a full device,
    a kill in the middle of a write) is never read, nor written after: the records before it
    are the study (see :func:`drop_cut_records`)."""
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class Journal(JournalFileBackend):
        def __init__(self, file_path: str):
            self._qg_lock = JournalFileSymlinkLock(file_path)  # Optuna's default lock
            super().__init__(file_path, lock_obj=self._qg_lock)
            self._qg_path = Path(file_path)
            with _locked(self._qg_lock):
                drop_cut_records(self._qg_path)

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            # As Optuna's, but a write that fails leaves the file as it was: the next record
            # then starts a line of its own instead of finishing a cut one.
            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            with _locked(self._qg_lock), open(self._qg_path, "r+b") as f:
                start = _whole_records_end(f, announce=self._qg_path)
                f.seek(start)
                try:
                    f.write(text.encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(start)
                    raise

    return Journal(str(path))


@contextlib.contextmanager
def _locked(lock: Any) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def drop_cut_records(path: Path) -> None:
    """Drop from the journal ``path`` what is not a whole record, with a warning naming it: a
    last line cut short (its writer stopped), or a line where a record was cut and the next
    one written after it (a cut the journal's writers before this one did not undo; the whole
    record after the cut is kept). Called with the journal's lock held."""
    if not path.exists():
        return
    with open(path, "r+b") as f:
        end = _whole_records_end(f, announce=path)
        f.seek(0)
        lines = f.read(end).splitlines(keepends=True)
        kept, dropped = [], 0
        for line in lines:
            if _record(line):
                kept.append(line)
                continue
            dropped += 1
            start = line.rfind(b'{"op_code":')
            if start > 0 and _record(line[start:]):
                kept.append(line[start:])
        if not dropped:
            return
    _warn_cut(path, f"{dropped} record(s) cut short in the middle")
    tmp = path.with_name(f".{path.name}.repaired")
    tmp.write_bytes(b"".join(kept))
    os.replace(tmp, path)


def _record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _whole_records_end(f: Any, *, announce: Path) -> int:
    """Where the journal's whole lines end in ``f``: its end, or after its last newline when
    what follows was cut short (dropped from the file, with a warning)."""
    size = f.seek(0, os.SEEK_END)
    position = size
    while position > 0:
        step = min(4096, position)
        f.seek(position - step)
        block = f.read(step)
        newline = block.rfind(b"\n")
        if newline >= 0:
            position = position - step + newline + 1
            break
        position -= step
    if position < size:
        f.truncate(position)
        _warn_cut(announce, f"its last record, cut short ({size - position} bytes)")
    return position


def _warn_cut(path: Path, what: str) -> None:
    get_logger().warning(
        "%s: dropped %s when a write to it stopped (a full device or a kill); the study goes "
        "on from its whole records",
        path,
        what,
    )


# Drivers whose package on PyPI has another name than the module SQLAlchemy imports.
_PACKAGES = {"MySQLdb": "mysqlclient", "psycopg2": "psycopg2-binary", "pymysql": "PyMySQL"}
# Jobs that open a new database at the same moment race to create Optuna's tables.
_CREATE_ATTEMPTS = 8


def _database(url: str) -> Any:
    """Optuna's storage in a database server. Several jobs opening a new database at the same
    moment (a SLURM job array) all try to create its tables; the losers see a unique-key or
    duplicate-table error from the database, and succeed once the winner is done."""
    import optuna
    import sqlalchemy

    # Optuna turns a missing driver into an ImportError without its name: import it first.
    sqlalchemy.engine.make_url(url).get_dialect().import_dbapi()
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == _CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1) * (1 + random.random()))  # apart from the others
    raise AssertionError("unreachable")


def warn_if_shared(url: str, mounts: str | None = None) -> bool:
    """Warn (and return True) when a ``sqlite:`` URL's file lies on a network file system."""
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if not path or path.startswith(":memory:"):
        return False
    kind = filesystem_type(Path(path.split("?", 1)[0]), mounts)  # sqlite:////abs or :///rel
    if kind in SHARED_FILESYSTEMS:
        get_logger().warning(
            "%s lies on a %s file system, where SQLite's locks are unreliable and a study can "
            "be corrupted by several jobs at once; use the default journal file (--storage "
            "PATH.journal) or a database server instead",
            redact(url),
            kind,
        )
        return True
    return False


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system holding ``path``, from /proc/mounts (None elsewhere)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    path = Path(path).absolute()
    best, kind = -1, None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == Path(point) or Path(point) in path.parents
        if inside and len(point) > best:
            best, kind = len(point), fields[2]
    return kind
