"""Dotted import paths: how a config names Python objects (a loss, a sampler, a dataset).

Resolved while the config loads, so a typo fails before any work starts, with the key named.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from ..errors import ConfigError, QGError, RunError, cause, in_user_code

# A string naming an importable object, such as "torch.nn.CrossEntropyLoss".
DottedPath = Annotated[str, "dotted-path"]

# Folders of config files loaded by this process (or by the one that started it: kept in the
# environment, which spawned ranks inherit): a module beside a config is found there, as in the
# current directory, when it is not on the Python path.
FOLDERS_VARIABLE = "QG_CONFIG_FOLDERS"
CONFIG_FOLDERS: list[Path] = [
    Path(f) for f in os.environ.get(FOLDERS_VARIABLE, "").split(os.pathsep) if f
]


def config_folder(path: Path, *, folder: bool = False) -> None:
    """Remember the folder of a config file just loaded (or, with ``folder``, ``path`` itself:
    where a run's config was loaded from when it trained), for modules beside it."""
    found = path.resolve() if folder else path.resolve().parent
    if found not in CONFIG_FOLDERS:
        CONFIG_FOLDERS.append(found)
        os.environ[FOLDERS_VARIABLE] = os.pathsep.join(map(str, CONFIG_FOLDERS))


def _beside(name: str) -> bool:
    """Whether the config's folder or the current directory holds module ``name`` (a
    ``name.py`` or a package ``name/``) and was not on the Python path: then it is put at its
    end (after installed packages: it never shadows one), and spawned processes inherit it."""
    # the config loaded last first: a module of the same name beside an earlier one is not it
    for folder in [*reversed(CONFIG_FOLDERS), Path.cwd()]:
        if (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file():
            if str(folder) in sys.path:
                return False
            sys.path.append(str(folder))
            importlib.invalidate_caches()
            return True
    return False


def resolve(dotted: str, *, key: str) -> Any:
    """Import the object a dotted path names; the error names the config key."""
    parts = dotted.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ConfigError(f"{key}: expected a dotted import path, found {dotted!r}")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == parts[0] and _beside(parts[0]):
                return resolve(dotted, key=key)  # found beside the config: import it from there
            if e.name and (e.name == module_name or module_name.startswith(f"{e.name}.")):
                continue  # this prefix is not a module; try a shorter one
            # the module imports a package that is not installed
            raise ConfigError(f"{key}: importing {module_name!r} failed: {e}") from e
        except Exception as e:  # the user's module itself is broken: where, as it happened
            doing = f"importing {module_name!r} for {key}"
            raise in_user_code(e, doing) or ConfigError(f"{key}: {doing} failed: {e!r}") from e
        break
    else:
        looked = ", ".join(str(f) for f in dict.fromkeys([*CONFIG_FOLDERS, Path.cwd()]))
        raise ConfigError(
            f"{key}: cannot import {dotted!r} (no module named {parts[0]!r} on the Python path, "
            f"nor in {looked}); put the folder holding {parts[0]}.py on PYTHONPATH"
        )
    for i in range(split, len(parts)):
        try:
            obj = getattr(obj, parts[i])
        except AttributeError:
            owner = ".".join(parts[:i])
            raise ConfigError(
                f"{key}: cannot import {dotted!r} ({owner!r} has no attribute {parts[i]!r})"
            ) from None
    if not callable(obj):
        raise ConfigError(f"{key}: {dotted!r} is not a class or function")
    return obj


# The extensions this process imported: module name -> the folder put on the Python path to
# find it (beside a config, or the working directory), or None. Processes this one starts
# import them too (parallel.spawn), before anything they are sent is used.
EXTENSIONS: dict[str, str | None] = {}


def import_extensions(names: Any) -> None:
    """Import the user's modules named by ``extensions`` (once each), so that what they
    register (task kinds, strategies, file formats) is known before the config that names it
    is read. A module is found as ``resolve`` finds one: on the Python path, or beside the
    config, or in the working directory."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"extensions: expected a list of module names, found {names!r}")
    for i, name in enumerate(names):
        _import_extension(name, f"extensions[{i}]")


def _import_extension(name: Any, key: str) -> None:
    if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
        raise ConfigError(f"{key}: expected a module's dotted name, found {name!r}")
    if name in EXTENSIONS:
        return
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        top = name.split(".")[0]
        if e.name == top and _beside(top):
            return _import_extension(name, key)
        if e.name == name or name.startswith(f"{e.name}."):
            looked = ", ".join(str(f) for f in dict.fromkeys([*CONFIG_FOLDERS, Path.cwd()]))
            raise ConfigError(
                f"{key}: no module named {name!r} on the Python path, nor in {looked}"
            ) from None
        raise ConfigError(f"{key}: importing {name!r} failed: {e}") from e
    except Exception as e:  # the user's module itself is broken: where, as it happened
        doing = f"importing {name!r} for {key}"
        raise in_user_code(e, doing) or ConfigError(f"{key}: {doing} failed: {e!r}") from e
    EXTENSIONS[name] = _root(module, name)


def _root(module: Any, name: str) -> str | None:
    """The folder on the Python path that module ``name`` was imported from."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    depth = len(name.split(".")) - (0 if hasattr(module, "__path__") else 1)
    return str(Path(file).resolve().parents[depth])


def reimport_extensions(extensions: dict[str, str | None]) -> None:
    """In a process started by one that imported ``extensions`` (:data:`EXTENSIONS`): the same
    modules, from the same folders."""
    for name, folder in extensions.items():
        if folder and folder not in sys.path:
            sys.path.append(folder)
        _import_extension(name, f"extensions ({name})")


def check_kwargs(
    fn: Any,
    kwargs: dict[str, Any],
    key: str,
    *,
    given: int = 0,
    passed: tuple[str, ...] = (),
    name: str | None = None,
) -> None:
    """A ConfigError naming ``key`` (and ``fn`` as ``name``, its dotted path) if ``fn`` cannot be
    called with ``given`` positional and the ``passed`` keyword arguments (those the caller
    adds) and ``kwargs`` (the config's): checked against its signature before the call, so that
    an exception of the call itself is never taken for a mistake in the config. A function
    without a signature to read is not checked."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(given), **dict.fromkeys(passed), **kwargs)
    except TypeError as e:
        named = [
            p.name
            for p in list(signature.parameters.values())[given:]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in passed
        ]
        name = name or getattr(fn, "__qualname__", repr(fn))
        raise ConfigError(
            f"{key}: {name} {e} (it takes {', '.join(named) or 'no keyword'})"
        ) from None  # the mismatch is all there is to say


class UserFunction:
    """The user's function ``dotted`` (the value of config key ``key``), called as the function
    itself; an exception it raises is reported as what it is, a RunError naming the function,
    its arguments and the line of the user's code it came from (the original exception is its
    cause, for ``--debug``). Pickled as its name: a process started afresh (a loader's worker)
    resolves it again."""

    def __init__(self, dotted: str, key: str):
        self.dotted, self.key = dotted, key
        self.fn = resolve(dotted, key=key)

    def __getstate__(self) -> dict[str, str]:
        return {"dotted": self.dotted, "key": self.key}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["dotted"], state["key"])

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except (QGError, RunError):
            raise
        except Exception as e:
            shown = ", ".join(
                repr(a) if isinstance(a, (str, int, float)) else type(a).__name__ for a in args
            )
            doing = f"in {self.key} {self.dotted}({shown})"
            raise in_user_code(e, doing) or RunError(f"{cause(e)} {doing}") from e
