"""What the library needs of its dependencies beyond their public APIs, one module per dependency.

Where a dependency offers no public way to do what the library must (assemble a PyG batch
without its per-attribute bookkeeping, time FSDP's reduce-scatter, read a torchmetrics metric's
reductions, name an Optuna trial to its storage, read W&B's offline files, stop a DataLoader's
workers now), the private attribute is used here and nowhere else (``tests/test_compat.py``
greps the rest of the package). Each module's :func:`check` looks for every internal it uses and
raises :class:`CompatError` naming the dependency, its installed version and what moved, so a
release that changes one is found by the adapter's test, not by a user's run. setup.cfg gives
the versions these adapters were tested with.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

ADAPTERS = ("pyg", "torch", "fsdp", "torchmetrics", "optuna", "wandb")


class CompatError(RuntimeError):
    """An internal of a dependency that the library relies on is not where it was."""


def installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def moved(distribution: str, what: str) -> CompatError:
    """The error for ``what`` of ``distribution`` (its pip name) not being where it was."""
    return CompatError(
        f"{distribution} {installed(distribution)}: {what}; QuantumGravPy's adapter "
        f"(QuantumGravPy/compat/) was written for the versions setup.cfg names"
    )


def check_all(names: tuple[str, ...] = ADAPTERS) -> list[str]:
    """Every adapter's :func:`check`, those of optional dependencies only where installed;
    the names of those checked."""
    checked = []
    for name in names:
        adapter = importlib.import_module(f"{__name__}.{name}")
        if installed(adapter.DISTRIBUTION) != "not installed":
            adapter.check()
            checked.append(name)
    return checked
