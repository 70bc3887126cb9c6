"""What every file format is asked: the :class:`FileFormat` base.

A format of array files (Zarr, HDF5) owns what differs between them: the suffixes that
name it, opening a file read-only, listing the members of the file or of one of its groups,
reading an array fast where it can, and creating, writing and closing a file. What the arrays
mean, the layouts (a group per causal set, or stacked arrays), and checking them are the same
for every format (:mod:`..stores`, :mod:`..files`). A format that holds whole graphs (saved
PyG graphs, :mod:`.saved_format`) sets ``holds_graphs``: opening it gives the list of graphs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ....errors import DataError, require
from ....registry import Registry

FORMATS: Registry[FileFormat] = Registry("--format")


class FileFormat:
    """A format of causal-set files; subclasses set the class attributes and implement the
    methods below.

    Everything the library reads and writes of a file goes through these methods: the store
    that :meth:`open` returns and the groups :meth:`create` and :meth:`group` make are handed
    back to them and never indexed by other code. The defaults read a store that behaves like
    h5py's and zarr's groups (members by name, ``keys()``, arrays sliced with ``[...]``); a
    library that does not overrides them."""

    name: ClassVar[str] = ""  # qg generate --format; a subclass with one is registered
    suffixes: ClassVar[tuple[str, ...]] = ()  # that name a file of this format
    title: ClassVar[str] = ""  # what a file of it is called in messages ("HDF5 file")
    named: ClassVar[str] = ""  # how its name ends, in messages ("an .h5/.hdf5 file")
    module: ClassVar[str] = ""  # the library that reads it (of the 'files' extra)
    # whole graphs (Data objects), not arrays: opened, it is a list of them; never written
    holds_graphs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name:
            taken = {
                s: other for other in FORMATS if other.name != cls.name for s in other.suffixes
            }
            for suffix in cls.suffixes:
                if suffix in taken:  # a file's name must say one format
                    other = taken[suffix]
                    raise TypeError(
                        f"file format {cls.name!r}: the suffix {suffix} is taken by "
                        f"{other.__module__}.{other.__name__} ({other.name!r})"
                    )
            FORMATS.add(cls)

    def claims(self, path: Path) -> bool:
        """Whether ``path`` is a file of this format by its name (one of its suffixes)."""
        return path.suffix in self.suffixes

    def recognises(self, path: Path) -> bool:
        """Whether ``path``, whose name says no format, is one of this format by its content
        (a signature at its start, the metadata of a store)."""
        return False

    def library(self) -> Any:
        """The library that reads the format; an error naming the extra if not installed."""
        return require(self.module, needed_for=f"reading {self.title}s", extra="files")

    def open(self, path: Path) -> contextlib.AbstractContextManager:
        """The file at ``path`` opened read-only, as a context manager that closes it; a
        DataError naming it if it cannot be opened. Only the opening is checked: an error of
        the code that reads it is that code's to report (a user's ``data.reader``, say)."""
        raise NotImplementedError

    def members(self, store: Any, path: Path, group: str | None = None) -> list[str]:
        """The names of the groups and arrays directly in the file (or in its ``group``)."""
        return list(store.keys() if group is None else store[group].keys())

    def is_group(self, store: Any, name: str) -> bool:
        """Whether member ``name`` of the file is a group (not an array)."""
        return hasattr(store[name], "keys")

    def shape(self, store: Any, name: str) -> tuple[int, ...]:
        """The shape of array ``name`` directly in the file, without reading it."""
        return tuple(store[name].shape)

    def read(
        self, store: Any, name: str, *, group: str | None = None, index: int | None = None
    ) -> np.ndarray:
        """Array ``name`` of the file (or of its ``group``), whole, or its row ``index`` alone
        (one sample of a stacked array, without reading the others); KeyError if there is no
        member of that name."""
        array = (store if group is None else store[group])[name]
        return np.asarray(array[...] if index is None else array[index])

    def graph_count(self, store: Any) -> int:
        """How many graphs a file that ``holds_graphs`` holds."""
        return len(store)

    def graph(self, store: Any, index: int) -> dict[str, Any]:
        """The attributes of graph ``index`` of a file that ``holds_graphs``, by name."""
        return dict(store[index].items())

    def read_fast(self, store: Any, path: Path, group: str, name: str) -> np.ndarray | None:
        """Array ``name`` of ``group``, read past the library where the format allows it;
        None where it does not (the library reads it)."""
        return None

    def create(self, path: Path) -> Any:
        """A new, empty file at ``path``, open for writing (its root group)."""
        raise NotImplementedError

    def group(self, root: Any, name: str) -> Any:
        """A new group ``name`` in a file :meth:`create` made."""
        return root.create_group(name)

    def write(self, group: Any, name: str, array: np.ndarray) -> None:
        """``array`` as ``name`` in ``group`` of a file :meth:`create` made."""
        raise NotImplementedError

    def close(self, root: Any) -> None:
        """Finish writing a file :meth:`create` made."""

    def describe(self, root: Any, name: str, text: str) -> None:
        """Attribute ``name`` of a file :meth:`create` made: a string on its root group."""
        root.attrs[name] = text

    def description(self, store: Any, name: str) -> str | None:
        """Attribute ``name`` of the root group of a file :meth:`open` opened, if it has one."""
        value = store.attrs.get(name)
        return None if value is None else str(value)


def format_of(path: Path) -> FileFormat:
    """The format of the file at ``path``: the one whose suffix its name ends with (no two
    formats share a suffix); for a name that says none, the one that recognises its content.
    Not the order the formats were registered in."""
    for cls in FORMATS:
        if cls().claims(path):
            return cls()
    # a format that only inherits its content test reads what its base reads: the base's
    found = [cls for cls in FORMATS if "recognises" in vars(cls) and cls().recognises(path)]
    if len(found) == 1:
        return found[0]()
    if found:  # two formats that read the same content: their authors must settle it
        names = ", ".join(cls.name for cls in found)
        raise DataError(f"{path}: its name says no format, and its content fits several ({names})")
    raise DataError(f"{path} is {described()}")


def described(*, written: bool = False) -> str:
    """``not an .h5/.hdf5 file or a .zarr store``, from the registered formats (``written``:
    those ``qg generate`` writes)."""
    return "not " + " or ".join(cls.named for cls in (writable() if written else FORMATS))


def writable() -> list[type[FileFormat]]:
    """The formats ``qg generate --format`` writes: those of arrays."""
    return [cls for cls in FORMATS if not cls.holds_graphs]


def reference_markdown() -> str:
    """The table of the file formats for the documentation, from their classes."""
    lines = [
        "| format | suffixes | read with | by its content | written by `qg generate` |",
        "|---|---|---|---|---|",
    ]
    for cls in FORMATS:
        content = "yes" if "recognises" in vars(cls) else "no"
        written = "no" if cls.holds_graphs else f"`--format {cls.name}`"
        shown = ", ".join(f"`{s}`" for s in cls.suffixes)
        title = cls.title[:1].upper() + cls.title[1:]
        lines.append(f"| {title} | {shown} | {cls.module} | {content} | {written} |")
    return "\n".join(lines)


def suffixes() -> tuple[str, ...]:
    return tuple(s for cls in FORMATS for s in cls.suffixes)
