"""QuantumGravPy: graph neural networks on causal sets and other graphs, from one CPU to many GPUs.

``import QuantumGravPy as qg``; the names below are the public API.
"""

from .augment import (
    AugmentationConfig,
    AugmentedDataset,
    RankAwareSeedGenerator,
    apply_augmentation,
    gen_augmentation_params,
    gen_distributed_augmentation_params,
    get_preset,
)
from .causal_sets import CausalSet, myrheim_meyer_dimension, ordering_fraction_expectation, sprinkle
from .checkpoint import load_checkpoint
from .config import Config, load_config
from .datasets import CausalSetDataset, split_dataset
from .distributed import (
    DistributedError,
    PortInUseError,
    RankFailedError,
    RankTimeoutError,
    cleanup_ddp,
    initialize_ddp,
)
from .early_stopping import EarlyStopping
from .ema import EMA
from .errors import CheckpointError, ConfigError, DataError, QGError, RunDirectoryError
from .evaluation import MetricSums, Tester, Validator
from .launch import WorkerError, launch, prepare_run, run_distributed, spawn
from .models import GNNModel
from .samplers import (
    ClassBalancedSampler,
    DistributedClassBalancedSampler,
    DistributedSamplerWrapper,
    DistributedWeightedRandomSampler,
    ProgressiveClassBalancedSampler,
)
from .sharding import DistributedRangeSplitter, stream_distributed_augmentation_chain
from .trainer import Trainer
from .trainer_ddp import TrainerDDP

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
    "MetricSums",
    "PortInUseError",
    "ProgressiveClassBalancedSampler",
    "QGError",
    "RankAwareSeedGenerator",
    "RankFailedError",
    "RankTimeoutError",
    "RunDirectoryError",
    "Tester",
    "Trainer",
    "TrainerDDP",
    "Validator",
    "WorkerError",
    "apply_augmentation",
    "cleanup_ddp",
    "gen_augmentation_params",
    "gen_distributed_augmentation_params",
    "get_preset",
    "initialize_ddp",
    "launch",
    "load_checkpoint",
    "load_config",
    "myrheim_meyer_dimension",
    "ordering_fraction_expectation",
    "prepare_run",
    "run_distributed",
    "spawn",
    "split_dataset",
    "sprinkle",
    "stream_distributed_augmentation_chain",
]
