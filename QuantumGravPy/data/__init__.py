"""The data layer: what each rank reads each epoch.

Three rooms, each importing only from those below it:

- :mod:`.batches` (top): the seeded split, loaders, samplers that stay correct under DDP,
  augmentation, and batches assembled by index arithmetic and handed over in one piece;
- :mod:`.sources`: where the graphs come from: the embedded causal sets, the user's files
  (Zarr stores, HDF5 files, saved graphs) and their formats, writing causal sets, the dataset a
  config names, and what the tasks read of it;
- :mod:`.storage` (bottom): graphs cached in a file named by a digest of their inputs, or kept
  on disk and read a batch at a time; ranges of work per rank, run in parallel processes.

This module is the public face: every name below is imported from here.

Imports ``physics`` (to build causal sets), ``config``, ``parallel`` (to generate with several
processes, and to agree on seeds) and the ground floor; nothing here trains.
"""

from .batches.augment import (
    AugmentationConfig,
    AugmentedDataset,
    RankAwareSeedGenerator,
    apply_augmentation,
    gen_augmentation_params,
    gen_distributed_augmentation_params,
    get_preset,
    stream_distributed_augmentation_chain,
)
from .batches.loaders import (
    batch_device,
    epoch_sampler,
    make_loader,
    make_train_loader,
    release_workers,
    split_dataset,
)
from .batches.prefetch import DevicePrefetcher, fed
from .batches.samplers import (
    ClassBalancedSampler,
    DistributedClassBalancedSampler,
    DistributedSamplerWrapper,
    DistributedWeightedRandomSampler,
    ProgressiveClassBalancedSampler,
    build_sampler,
)
from .sources.causal_sets import CausalSetDataset, GeneratedSource, generate_causal_set_graphs
from .sources.datasets import (
    SHARED_BUILD_MIN,
    check_dataset,
    choose_storage,
    dataset_from_config,
    dataset_labels,
    graph_attribute,
    graph_feature_width,
    in_memory_values,
)
from .sources.files import FileDataset, FileSource, read_files
from .sources.targets import (
    check_file_targets,
    check_target,
    label_notice,
    num_edge_features,
    num_node_features,
    target_statistics,
    task_num_outputs,
)
from .sources.writing import write_causal_sets, write_embedded
from .storage.disk import DiskDataset
from .storage.ranges import DistributedRangeSplitter

__all__ = [
    "SHARED_BUILD_MIN",
    "AugmentationConfig",
    "AugmentedDataset",
    "CausalSetDataset",
    "ClassBalancedSampler",
    "DevicePrefetcher",
    "DiskDataset",
    "DistributedClassBalancedSampler",
    "DistributedRangeSplitter",
    "DistributedSamplerWrapper",
    "DistributedWeightedRandomSampler",
    "FileDataset",
    "FileSource",
    "GeneratedSource",
    "ProgressiveClassBalancedSampler",
    "RankAwareSeedGenerator",
    "apply_augmentation",
    "batch_device",
    "build_sampler",
    "check_dataset",
    "check_file_targets",
    "check_target",
    "choose_storage",
    "dataset_from_config",
    "dataset_labels",
    "epoch_sampler",
    "fed",
    "gen_augmentation_params",
    "gen_distributed_augmentation_params",
    "generate_causal_set_graphs",
    "get_preset",
    "graph_attribute",
    "graph_feature_width",
    "in_memory_values",
    "label_notice",
    "make_loader",
    "make_train_loader",
    "num_edge_features",
    "num_node_features",
    "read_files",
    "release_workers",
    "split_dataset",
    "stream_distributed_augmentation_chain",
    "target_statistics",
    "task_num_outputs",
    "write_causal_sets",
    "write_embedded",
]
