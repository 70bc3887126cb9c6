"""The configuration layer: a YAML file and ``key=value`` overrides become one typed, frozen
:class:`Config`, validated once at the entry point; everything above reads it and nothing else.

- :mod:`.schema`: the dataclasses, their defaults and documentation comments;
- :mod:`.loading`: YAML, overrides and the validating walk (errors name the dotted key);
- :mod:`.dotted`: dotted import paths to the user's own classes and functions;
- :mod:`.docs`: the README's configuration reference, generated from the schema.

Imports only the ground floor (``errors``).
"""

from .dotted import DottedPath, resolve
from .loading import apply_overrides, config_from_dict, config_to_dict, dump_config, load_config
from .schema import (
    EARLY_STOPPING_METRICS,
    SAMPLER_NAMES,
    AugmentationSection,
    Config,
    DataConfig,
    EarlyStoppingConfig,
    EvalConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    SchedulerConfig,
    TrainingConfig,
    ValidationConfig,
    improves_towards,
)

__all__ = [
    "EARLY_STOPPING_METRICS",
    "SAMPLER_NAMES",
    "AugmentationSection",
    "Config",
    "DataConfig",
    "DottedPath",
    "EarlyStoppingConfig",
    "EvalConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "TrainingConfig",
    "ValidationConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "improves_towards",
    "load_config",
    "resolve",
]
