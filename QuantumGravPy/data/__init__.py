"""The data layer: what each rank reads each epoch.

- :mod:`.causal_sets`: the embedded dataset, causal sets generated as graphs and cached;
- :mod:`.stores`, :mod:`.files`, :mod:`.writing`: causal sets in Zarr stores and HDF5 files
  (QuantumGrav.jl's layouts): opening and finding samples, building cached graphs, writing;
- :mod:`.disk`: graphs kept on disk (``data.storage: disk``) and read a batch at a time;
- :mod:`.datasets`: the dataset a config names (embedded or the user's) in the storage it
  chooses, checked, and its per-graph attributes;
- :mod:`.targets`: what the tasks read of the data: targets, output counts, target statistics;
- :mod:`.loaders`: the seeded train/validation/test split and the loaders built on it;
- :mod:`.batching`, :mod:`.rows`: batches assembled by index arithmetic from the in-memory
  tensors or from the rows on disk, with no ``Data`` per graph; :mod:`.transfer`: the loader
  whose worker processes hand a batch over in one shared buffer;
- :mod:`.samplers`: samplers that stay correct under DDP (a wrapper for any sampler, and
  counter-based native ones);
- :mod:`.augment`: deterministic augmentation keyed by sample and epoch, or by rank;
- :mod:`.ranges`: contiguous ranges of work per rank, and the per-rank parameter streams.

Imports ``physics`` (to build causal sets), ``config``, ``parallel`` (to generate with several
processes, and to agree on seeds) and the ground floor; nothing here trains.
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
from .causal_sets import CausalSetDataset, GeneratedSource, generate_causal_set_graphs
from .datasets import (
    SHARED_BUILD_MIN,
    check_dataset,
    choose_storage,
    dataset_from_config,
    dataset_labels,
    graph_attribute,
    graph_feature_width,
    in_memory_values,
)
from .disk import DiskDataset
from .files import FileDataset, FileSource, read_files
from .loaders import (
    batch_device,
    epoch_sampler,
    make_loader,
    make_train_loader,
    release_workers,
    split_dataset,
)
from .prefetch import DevicePrefetcher, fed
from .ranges import DistributedRangeSplitter, stream_distributed_augmentation_chain
from .samplers import (
    ClassBalancedSampler,
    DistributedClassBalancedSampler,
    DistributedSamplerWrapper,
    DistributedWeightedRandomSampler,
    ProgressiveClassBalancedSampler,
    build_sampler,
)
from .targets import (
    check_file_targets,
    check_target,
    label_notice,
    num_edge_features,
    num_node_features,
    target_statistics,
    task_num_outputs,
)
from .writing import write_causal_sets, write_embedded

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
