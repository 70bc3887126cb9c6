"""QuantumGravPy: graph neural networks on causal sets and other graphs, from one CPU to many GPUs.

``import QuantumGravPy as qg``; the names below are the public API.

The package is built in layers, each importing only from the ones below it (a test checks it):

    cli/          the command line: its commands, and their parser
    tune/         hyperparameter search with Optuna: studies of trials, pruning, best config
    predict/      a trained run's model on new data: load_model(), predict(); sample() of a
                  generative model
    training/     Trainer, TrainerDDP, evaluation, early stopping, EMA, fit(), launch()
    runs/         run directory, checkpoints, resuming, reproducibility records, plots
    models/       GNNModel, TensorInputs, CausalSetGrowth
    data/         datasets, file formats, split and loaders, samplers, augmentation, ranges
    parallel/     process group and collectives, what processes do together, devices,
                  spawning, strategies (ddp, zero, fsdp, ...)
    config/       schema, loading and overrides, dotted paths, generated docs
    tasks/        task kinds, one module each
    physics/      causal sets, sprinkling, observables
    errors, logs, registry, figures  the ground floor

Importing the package is quick: each name loads its layer on first use (``qg.Trainer`` imports
torch, torch_geometric and the training code; ``qg.load_config`` only the config), so the command
line answers ``--help`` or a config mistake without loading the model libraries.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Each public name, by the module that defines it; loaded by __getattr__ on first use.
_SOURCES: dict[str, tuple[str, ...]] = {
    "config": ("Config", "load_config"),
    "data": (
        "AugmentationConfig",
        "AugmentedDataset",
        "CausalSetDataset",
        "ClassBalancedSampler",
        "DistributedClassBalancedSampler",
        "DistributedRangeSplitter",
        "DistributedSamplerWrapper",
        "DistributedWeightedRandomSampler",
        "ProgressiveClassBalancedSampler",
        "RankAwareSeedGenerator",
        "apply_augmentation",
        "gen_augmentation_params",
        "gen_distributed_augmentation_params",
        "get_preset",
        "split_dataset",
        "stream_distributed_augmentation_chain",
    ),
    "errors": (
        "CheckpointError",
        "ConfigError",
        "DataError",
        "DiskFullError",
        "OutageError",
        "QGError",
        "RunDirectoryError",
        "RunError",
    ),
    "models": ("GNNModel",),
    "parallel": (
        "DistributedError",
        "PortInUseError",
        "RankFailedError",
        "RankTimeoutError",
        "WorkerError",
        "cleanup_ddp",
        "initialize_ddp",
        "run_distributed",
        "spawn",
    ),
    "physics": (
        "CausalSet",
        "conformal_sprinkling",
        "destroyed_sprinkling",
        "kleitman_rothschild_order",
        "myrheim_meyer_dimension",
        "observables",
        "ordering_fraction_expectation",
        "random_order",
        "sprinkle",
        "transitive_percolation",
    ),
    "predict": ("LoadedModel", "Predictions", "load_model", "predict", "sample"),
    "runs": ("load_checkpoint",),
    "training": (
        "EMA",
        "EarlyStopping",
        "Listener",
        "NonFiniteGradientError",
        "ReplicaMismatchError",
        "Tester",
        "Trainer",
        "TrainerDDP",
        "Validator",
        "launch",
        "prepare_run",
        "profile",
    ),
    "tune": ("tune",),
}
_SOURCE_OF = {name: module for module, names in _SOURCES.items() for name in names}
# Resolved as qg.NAME for code written against earlier versions, but not documented as the
# public API (__all__): each lives in its layer, where it is imported from.
_EARLIER = (
    "AugmentedDataset",
    "EMA",
    "NonFiniteGradientError",
    "ReplicaMismatchError",
    "split_dataset",
)
_SUBPACKAGES = ("cli", "config", "data", "errors", "logs", "models", "parallel", "physics")
_SUBPACKAGES += ("predict", "runs", "training", "tune")


def __getattr__(name: str) -> Any:
    if name in _SOURCE_OF:
        value = getattr(importlib.import_module(f".{_SOURCE_OF[name]}", __name__), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the subpackage ``predict`` (or ``tune``) binds it here under its own name,
        # which is also the name of the function it defines: qg.predict stays the function.
        if name in _SOURCE_OF and getattr(value, "__name__", None) == f"{__name__}.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # the names of __all__ for type checkers and the API docs, which read the source
    from .config import Config, load_config
    from .data import (
        AugmentationConfig,
        CausalSetDataset,
        ClassBalancedSampler,
        DistributedClassBalancedSampler,
        DistributedRangeSplitter,
        DistributedSamplerWrapper,
        DistributedWeightedRandomSampler,
        ProgressiveClassBalancedSampler,
        RankAwareSeedGenerator,
        apply_augmentation,
        gen_augmentation_params,
        gen_distributed_augmentation_params,
        get_preset,
        stream_distributed_augmentation_chain,
    )
    from .errors import (
        CheckpointError,
        ConfigError,
        DataError,
        DiskFullError,
        OutageError,
        QGError,
        RunDirectoryError,
        RunError,
    )
    from .models import GNNModel
    from .parallel import (
        DistributedError,
        PortInUseError,
        RankFailedError,
        RankTimeoutError,
        WorkerError,
        cleanup_ddp,
        initialize_ddp,
        run_distributed,
        spawn,
    )
    from .physics import (
        CausalSet,
        conformal_sprinkling,
        destroyed_sprinkling,
        kleitman_rothschild_order,
        myrheim_meyer_dimension,
        observables,
        ordering_fraction_expectation,
        random_order,
        sprinkle,
        transitive_percolation,
    )
    from .predict import LoadedModel, Predictions, load_model, predict, sample
    from .runs import load_checkpoint
    from .training import (
        EarlyStopping,
        Listener,
        Tester,
        Trainer,
        TrainerDDP,
        Validator,
        launch,
        prepare_run,
        profile,
    )
    from .tune import tune


__all__ = [  # the API the documentation describes (docs/api.md)
    "AugmentationConfig",
    "CausalSet",
    "CausalSetDataset",
    "CheckpointError",
    "ClassBalancedSampler",
    "Config",
    "ConfigError",
    "DataError",
    "DiskFullError",
    "DistributedClassBalancedSampler",
    "DistributedError",
    "DistributedRangeSplitter",
    "DistributedSamplerWrapper",
    "DistributedWeightedRandomSampler",
    "EarlyStopping",
    "GNNModel",
    "Listener",
    "LoadedModel",
    "OutageError",
    "PortInUseError",
    "Predictions",
    "ProgressiveClassBalancedSampler",
    "QGError",
    "RankAwareSeedGenerator",
    "RankFailedError",
    "RankTimeoutError",
    "RunDirectoryError",
    "RunError",
    "Tester",
    "Trainer",
    "TrainerDDP",
    "Validator",
    "WorkerError",
    "apply_augmentation",
    "cleanup_ddp",
    "conformal_sprinkling",
    "destroyed_sprinkling",
    "gen_augmentation_params",
    "gen_distributed_augmentation_params",
    "get_preset",
    "initialize_ddp",
    "kleitman_rothschild_order",
    "launch",
    "load_checkpoint",
    "load_config",
    "load_model",
    "myrheim_meyer_dimension",
    "observables",
    "ordering_fraction_expectation",
    "predict",
    "prepare_run",
    "profile",
    "random_order",
    "run_distributed",
    "sample",
    "spawn",
    "sprinkle",
    "stream_distributed_augmentation_chain",
    "transitive_percolation",
    "tune",
]
