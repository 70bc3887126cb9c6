"""Replacing an output of several files (``qg sample``'s samples and their report) so that a
kill at any moment never leaves new samples beside an old report, nor no samples at all.

The new files are written whole in a hidden folder beside the output,
``.<name>.partial-XXXX`` (with an ``owner`` file naming the process), and one rename makes
that folder ``.<name>.swap``: the moment the new output counts as written. The files are then
moved in: the old report out first, the samples swapped in one call (a file by ``os.replace``,
a ``.zarr`` folder by Linux's ``renameat2(RENAME_EXCHANGE)`` where the file system has it), the
new report last. A kill in between leaves the old samples, or the new ones, each with their own
report or none; the next ``qg sample`` to that output moves the rest in before anything else,
and removes the partial folders of processes that are gone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import RunDirectoryError
from ..logs import get_logger

OWNER = "owner"  # in a partial folder: "pid host" of the process writing it
NEW = "new.inode"  # in a swap folder: the new samples' inode, to tell them from the old
OLD = "replaced"  # in a swap folder: the old files, removed with it
_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}


class Replacement:
    """The files ``paths`` (the samples first, then what goes with them), all in one folder,
    replaced together (see the module's description)."""

    def __init__(self, paths: Sequence[Path]):
        self.paths = [Path(p) for p in paths]
        self.folder = self.paths[0].parent
        self.name = self.paths[0].name
        self.swap = self.folder / f".{self.name}.swap"
        self.partial: Path | None = None

    def recover(self) -> None:
        """Finish what an earlier write to these paths left: move in an output it had written
        whole, remove partial folders whose process is gone."""
        if self.swap.is_dir():
            get_logger().warning(
                "%s: an earlier qg sample was stopped while moving its output in; finishing it",
                self.paths[0],
            )
            self._move_in()
        for partial in self.folder.glob(f".{self.name}.partial-*"):
            if partial.is_dir() and not _alive(partial / OWNER):
                shutil.rmtree(partial, ignore_errors=True)

    def check(self) -> None:
        """Refuse a folder this process cannot write, on every rank of a job alike (only one
        makes the partial folder: the others must not wait for it in vain)."""
        if not os.access(self.folder, os.W_OK):
            code = errno.EROFS if os.statvfs(self.folder).f_flag & os.ST_RDONLY else errno.EACCES
            raise RunDirectoryError(
                f"--output: folder {self.folder} cannot be written ({os.strerror(code)})"
            )

    def begin(self) -> Path:
        """The new hidden folder the files are written in (named by their final names); made
        now, so that a folder that cannot be written is told before any work."""
        try:
            partial = Path(tempfile.mkdtemp(prefix=f".{self.name}.partial-", dir=self.folder))
            (partial / OWNER).write_text(f"{os.getpid()} {socket.gethostname()}\n")
        except OSError as e:
            if e.errno not in _READ_ONLY:
                raise
            raise RunDirectoryError(
                f"--output: folder {self.folder} cannot be written ({e.strerror})"
            ) from e
        self.partial = partial
        return partial

    def abandon(self) -> None:
        """Remove the partial folder (the write failed; the old output stays as it was)."""
        if self.partial is not None:
            shutil.rmtree(self.partial, ignore_errors=True)
            self.partial = None

    def commit(self) -> None:
        """The files written in the partial folder become the output: one rename, then moved
        into place."""
        assert self.partial is not None
        new = self.partial / self.name
        (self.partial / NEW).write_text(str(new.stat().st_ino))
        (self.partial / OWNER).unlink()
        if self.swap.exists():  # left by a process that never got to recover it
            shutil.rmtree(self.swap)
        os.rename(self.partial, self.swap)
        self.partial = None
        self._move_in()

    def _move_in(self) -> None:
        """Each step checks what is done already, so that running it again after a kill
        finishes the job."""
        samples, *others = self.paths
        old = self.swap / OLD
        old.mkdir(exist_ok=True)
        for path in others:  # never a new samples' file beside an old report
            if (self.swap / path.name).exists() and _exists(path):
                os.replace(path, old / path.name)
        new_inode = int((self.swap / NEW).read_text())
        staged = self.swap / self.name
        if staged.exists() or staged.is_symlink():
            if _exists(samples) and samples.stat().st_ino == new_inode:
                os.replace(staged, old / self.name)  # swapped already: what is left is the old
            else:
                _swap(staged, samples)
                if staged.exists():
                    os.replace(staged, old / self.name)
        for path in others:
            if (self.swap / path.name).exists():
                os.replace(self.swap / path.name, path)
        shutil.rmtree(self.swap)


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _swap(new: Path, target: Path) -> None:
    """``new`` moved to ``target``, in one call where it can be: a file over a file by
    os.replace, a folder over a folder by exchanging them (the old one then lies at ``new``)."""
    if not target.is_dir() or target.is_symlink():
        os.replace(new, target)
        return
    if _exchange(new, target):
        return
    # no atomic exchange here (another OS, or a file system without it): two renames
    aside = new.with_name(f"{new.name}.old")
    os.rename(target, aside)
    os.rename(new, target)
    os.rename(aside, new)


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Exchange ``a`` and ``b`` atomically (Linux's renameat2); False where it is unsupported."""
    name = ctypes.util.find_library("c")
    try:
        renameat2 = ctypes.CDLL(name, use_errno=True).renameat2 if name else None
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is None:
        return False
    at_fdcwd = -100
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def _alive(owner: Path) -> bool:
    """Whether the process an ``owner`` file names still runs (one on another host, or an
    owner not yet written, counts as alive: its folder is left alone)."""
    try:
        pid, host = owner.read_text().split()
    except (OSError, ValueError):
        return not owner.parent.exists() or _young(owner.parent)
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def _young(folder: Path) -> bool:
    """A partial folder without its owner file: made a moment ago by a process that has not
    written it yet, or left by one killed in that moment; only the second is older than a
    minute."""
    try:
        return time.time() - folder.stat().st_mtime < 60
    except OSError:
        return False
