"""QuantumGravPy: graph neural networks on causal sets and other graphs, from one CPU to many GPUs.

``import QuantumGravPy as qg``; the names below are the public API.
"""

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
from .trainer import Trainer
from .trainer_ddp import TrainerDDP

__version__ = "0.1.0"

__all__ = [
    "CausalSet",
    "CausalSetDataset",
    "CheckpointError",
    "ClassBalancedSampler",
    "Config",
    "ConfigError",
    "DataError",
    "DistributedClassBalancedSampler",
    "DistributedError",
    "DistributedSamplerWrapper",
    "DistributedWeightedRandomSampler",
    "EarlyStopping",
    "GNNModel",
    "MetricSums",
    "PortInUseError",
    "ProgressiveClassBalancedSampler",
    "QGError",
    "RankFailedError",
    "RankTimeoutError",
    "RunDirectoryError",
    "Tester",
    "Trainer",
    "TrainerDDP",
    "Validator",
    "WorkerError",
    "cleanup_ddp",
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
]
