"""QuantumGravPy: graph neural networks on causal sets and other graphs, from one CPU to many GPUs.

``import QuantumGravPy as qg``; the names below are the public API.

The package is built in layers, each importing only from the ones below it (a test checks it):

    cli.py        the command line
    tune/         hyperparameter search with Optuna: studies of trials, pruning, best config
    predict/      a trained run's model on new data: load_model(), predict()
    training/     Trainer, TrainerDDP, evaluation, early stopping, EMA, launch()
    data/         datasets, split and loaders, samplers, augmentation, range splitting
    models/       GNNModel
    runs/         run directory, checkpoints, resuming, reproducibility records, plots
    parallel/     process group and collectives, spawning, shared-memory gradient exchange
    config/       schema, loading and overrides, dotted paths, generated docs
    physics/      causal sets, sprinkling, observables
    errors, logs  the ground floor
"""

from .config import Config, load_config
from .data import (
    AugmentationConfig,
    AugmentedDataset,
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
    split_dataset,
    stream_distributed_augmentation_chain,
)
from .errors import CheckpointError, ConfigError, DataError, QGError, RunDirectoryError
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
from .predict import LoadedModel, Predictions, load_model, predict
from .runs import load_checkpoint
from .training import (
    EMA,
    EarlyStopping,
    MetricSums,
    NonFiniteGradientError,
    ReplicaMismatchError,
    Tester,
    Trainer,
    TrainerDDP,
    Validator,
    launch,
    prepare_run,
    profile,
)
from .tune import tune

__version__ = "0.1.0"

__all__ = [
    "EMA",
    "AugmentationConfig",
    "AugmentedDataset",
    "CausalSet",
    "CausalSetDataset",
    "CheckpointError",
    "ClassBalancedSampler",
    "Config",
    "ConfigError",
    "DataError",
    "DistributedClassBalancedSampler",
    "DistributedError",
    "DistributedRangeSplitter",
    "DistributedSamplerWrapper",
    "DistributedWeightedRandomSampler",
    "EarlyStopping",
    "GNNModel",
    "LoadedModel",
    "MetricSums",
    "NonFiniteGradientError",
    "PortInUseError",
    "Predictions",
    "ProgressiveClassBalancedSampler",
    "QGError",
    "RankAwareSeedGenerator",
    "RankFailedError",
    "RankTimeoutError",
    "ReplicaMismatchError",
    "RunDirectoryError",
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
    "spawn",
    "split_dataset",
    "sprinkle",
    "stream_distributed_augmentation_chain",
    "transitive_percolation",
    "tune",
]
