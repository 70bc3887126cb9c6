"""The configuration layer: a YAML file and ``key=value`` overrides become one typed, frozen
:class:`Config`, validated once at the entry point; everything above reads it and nothing else.

- :mod:`.schema`: the dataclasses, their defaults and documentation comments (the ``data``
  section's in :mod:`.data`);
- :mod:`.tasks`: the tasks and their metrics (what each type offers is its kind's:
  :mod:`QuantumGravPy.tasks`);
- :mod:`.across`: what the sections say together: the tasks of a config (its implicit one
  too), the history columns they make, and the checks of settings of different sections;
- :mod:`.loading`: YAML, overrides and the validating walk (errors name the dotted key);
- :mod:`.dotted`: dotted import paths to the user's own classes and functions;
- :mod:`.objects`: objects built by name inside ``model.kwargs`` (``{class: ..., kwargs:
  ...}``, ``{object: ...}``);
- :mod:`.docs`: the documentation's configuration reference (docs/config.md), generated
  from the schema.

Imports only the ground floor (``errors``) and the task kinds.
"""

from .across import headline_columns, history_columns, shown_columns, task_list
from .data import DataConfig
from .dotted import DottedPath, UserFunction, check_kwargs, resolve
from .loading import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
    per_process,
)
from .schema import (
    SAMPLER_NAMES,
    AugmentationSection,
    Config,
    EarlyStoppingConfig,
    EvalConfig,
    GradientClipConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    ParallelConfig,
    SchedulerConfig,
    TrackingConfig,
    TrainingConfig,
    ValidationConfig,
)
from .tasks import IMPLICIT_TASK, TaskConfig, balanced_task, improves_towards

__all__ = [
    "IMPLICIT_TASK",
    "SAMPLER_NAMES",
    "AugmentationSection",
    "Config",
    "DataConfig",
    "DottedPath",
    "EarlyStoppingConfig",
    "EvalConfig",
    "GradientClipConfig",
    "ModelConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "TaskConfig",
    "TrackingConfig",
    "TrainingConfig",
    "UserFunction",
    "ValidationConfig",
    "apply_overrides",
    "balanced_task",
    "check_kwargs",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "headline_columns",
    "history_columns",
    "improves_towards",
    "load_config",
    "per_process",
    "resolve",
    "shown_columns",
    "task_list",
]
