"""The typed configuration: one tree of frozen dataclasses, read from YAML and validated once.

Defaults live here and nowhere else. Loading rejects unknown keys, wrong types and values out of
range with an error that names the dotted key, what was expected and what was found. Python
objects are referenced by dotted import paths, which are imported while loading, so a typo fails
before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml

from .errors import ConfigError

# A string naming an importable object, such as "torch.nn.CrossEntropyLoss".
DottedPath = Annotated[str, "dotted-path"]


def _check(predicate: Callable[[Any], bool], expected: str) -> dict:
    return {"check": predicate, "expected": expected}


_POSITIVE = _check(lambda v: v > 0, "a positive number")
_NON_NEGATIVE = _check(lambda v: v >= 0, "a number >= 0")
_PROBABILITY = _check(lambda v: 0 <= v < 1, "a number in [0, 1)")


@dataclass(frozen=True)
class DataConfig:
    root: str = "data"  # where the generated dataset is cached
    num_graphs: int = field(default=3000, metadata=_POSITIVE)  # causal sets to generate
    num_points: tuple[int, int] = (32, 64)  # [min, max] elements per causal set
    dimensions: tuple[int, ...] = (2, 3, 4)  # spacetime dimensions; y is the index in this list
    seed: int = 0  # generation and the train/val/test split
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)  # train, validation, test
    dataset: DottedPath | None = None  # a function returning your own Dataset or list of Data
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments for it

    def validate(self) -> None:
        lo, hi = self.num_points
        if not 1 <= lo <= hi:
            raise ConfigError(
                f"data.num_points: expected [min, max] with 1 <= min <= max, found {[lo, hi]}"
            )
        if not self.dimensions or len(set(self.dimensions)) != len(self.dimensions):
            raise ConfigError(
                f"data.dimensions: expected a non-empty list of distinct dimensions, "
                f"found {list(self.dimensions)}"
            )
        bad = [d for d in self.dimensions if not 2 <= d <= 6]
        if bad:
            raise ConfigError(f"data.dimensions: expected dimensions from 2 to 6, found {bad}")
        if any(f < 0 for f in self.split) or abs(sum(self.split) - 1) > 1e-6:
            raise ConfigError(
                f"data.split: expected three fractions >= 0 summing to 1, found {list(self.split)}"
            )


@dataclass(frozen=True)
class ModelConfig:
    conv: DottedPath = "torch_geometric.nn.GraphConv"  # any message-passing layer class
    # extra arguments for each conv layer, e.g. {aggr: mean}; bias is left out before a graph
    # or batch norm (which subtracts it again) unless given here
    conv_kwargs: dict[str, Any] = field(default_factory=dict)
    hidden_channels: int = field(default=64, metadata=_POSITIVE)  # width of every layer
    num_layers: int = field(default=3, metadata=_POSITIVE)  # message-passing blocks
    activation: DottedPath = "torch.nn.ReLU"  # an nn.Module class or a function
    dropout: float = field(default=0.0, metadata=_PROBABILITY)  # after each block and head layer
    residual: bool = True  # add each block's input to its output
    # graph: GraphNorm, statistics of each graph alone; layer: per node; batch: BatchNorm
    norm: Literal["graph", "layer", "batch", "none"] = "graph"
    pooling: tuple[Literal["mean", "max", "add"], ...] = ("mean", "max", "add")  # concatenated
    head_channels: tuple[int, ...] = (64,)  # hidden layers of the MLP head
    in_channels: int | None = None  # node features; null: taken from the dataset
    num_classes: int | None = None  # null: taken from the dataset

    def validate(self) -> None:
        if not self.pooling:
            raise ConfigError("model.pooling: expected at least one of mean, max, add, found []")
        if any(c <= 0 for c in self.head_channels):
            raise ConfigError(
                f"model.head_channels: expected positive sizes, found {list(self.head_channels)}"
            )


@dataclass(frozen=True)
class OptimizerConfig:
    type: DottedPath = "torch.optim.AdamW"  # any torch.optim.Optimizer class
    kwargs: dict[str, Any] = field(default_factory=lambda: {"lr": 0.003})  # its arguments


@dataclass(frozen=True)
class SchedulerConfig:
    type: DottedPath  # e.g. torch.optim.lr_scheduler.CosineAnnealingLR; stepped once per epoch
    kwargs: dict[str, Any] = field(default_factory=dict)  # its arguments besides the optimizer


@dataclass(frozen=True)
class TrainingConfig:
    seed: int = 0  # model initialisation and the order of training batches
    device: str = "auto"  # auto, cpu, cuda or cuda:N
    path: str | None = None  # the run directory; null: runs/<name>
    num_epochs: int = field(default=30, metadata=_POSITIVE)  # at most (early stopping)
    batch_size: int = field(default=32, metadata=_POSITIVE)  # per process
    drop_last: bool = False  # drop each epoch's last, smaller batch (a world-size condition)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)  # the optimizer
    lr_scheduler: SchedulerConfig | None = None  # null: a constant learning rate
    num_workers: int = field(default=0, metadata=_NON_NEGATIVE)  # data-loading worker processes
    checkpoint_every: int = field(default=0, metadata=_NON_NEGATIVE)  # 0: only best and last
    # null (shuffle), class_balanced, progressive, weighted (graph attribute "weight"), or a
    # dotted path to f(dataset, **sampler_kwargs) -> Sampler; distributed automatically
    sampler: str | None = None
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {num_samples: 5000}
    # optimizer steps every N batches; gradients of the others are kept, not synchronised
    accumulate_grad_batches: int = field(default=1, metadata=_POSITIVE)
    # "32": float32; "bf16" or "16": autocast to bfloat16 / float16 (16 adds a gradient scaler);
    # "64": float64 weights and data, which keeps runs on different process counts together
    # far longer (see the README on reproducibility)
    precision: Literal["32", "bf16", "16", "64"] = "32"
    # null: no average; e.g. 0.999: validation and test use an exponential moving average
    ema_decay: float | None = field(
        default=None, metadata=_check(lambda v: 0 < v < 1, "a number in (0, 1)")
    )

    def validate(self) -> None:
        from .samplers import SAMPLER_NAMES

        if self.sampler is not None and self.sampler not in SAMPLER_NAMES:
            if "." not in self.sampler:
                raise ConfigError(
                    f"training.sampler: expected null, {', '.join(SAMPLER_NAMES)} or a dotted "
                    f"path, found {self.sampler!r}"
                )
            resolve(self.sampler, key="training.sampler")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(
                f"training.device: expected auto, cpu, cuda or cuda:N, found {self.device!r}"
            )


@dataclass(frozen=True)
class EvalConfig:
    batch_size: int = field(default=256, metadata=_POSITIVE)  # graphs per evaluation batch


@dataclass(frozen=True)
class ValidationConfig(EvalConfig):
    # rank0: rank 0 evaluates everything while the others wait; sharded: each rank evaluates a
    # disjoint part and the sums are all-reduced. Both give the single-process numbers; the
    # test set is evaluated the same way.
    mode: Literal["rank0", "sharded"] = "rank0"


@dataclass(frozen=True)
class ParallelConfig:
    world_size: int = field(default=1, metadata=_POSITIVE)  # > 1: spawn that many processes
    backend: Literal["auto", "nccl", "gloo"] = "auto"  # auto: NCCL with CUDA, gloo otherwise
    master_addr: str = "127.0.0.1"  # where rank 0 listens (spawned jobs)
    master_port: int | None = field(  # null: a free port is chosen
        default=None, metadata=_check(lambda v: 0 < v < 65536, "a port from 1 to 65535")
    )
    find_unused_parameters: bool = False  # DDP's option for models that skip parameters
    timeout_s: float = field(default=300.0, metadata=_POSITIVE)  # a silent rank ends the job
    # Average gradients through shared memory when all ranks are CPU processes on one x86-64
    # machine (much less waiting than gloo on busy cores; the same numbers). false: always gloo.
    shared_memory: bool = True


EARLY_STOPPING_METRICS = ("val_loss", "val_accuracy", "train_loss")


@dataclass(frozen=True)
class AugmentationSection:
    preset: Literal["mild", "moderate", "aggressive"] | None = None  # null: no augmentation
    # per_sample: draws keyed by (sample, epoch), the same for any number of processes;
    # per_rank: keyed by rank and world size as well
    seeding: Literal["per_sample", "per_rank"] = "per_sample"


@dataclass(frozen=True)
class EarlyStoppingConfig:
    enabled: bool = True  # false: train all epochs, still keep the best checkpoint by metric
    metric: Literal["val_loss", "val_accuracy", "train_loss"] = "val_loss"  # also picks best.pt
    mode: Literal["min", "max"] = "min"  # min for losses, max for accuracy
    patience: int = field(default=8, metadata=_POSITIVE)  # epochs without improvement
    delta: float = field(default=0.0, metadata=_NON_NEGATIVE)  # smallest change that counts
    grace_period: int = field(default=0, metadata=_NON_NEGATIVE)  # epochs before it may stop

    def validate(self) -> None:
        expected = "max" if self.metric.endswith("accuracy") else "min"
        if self.mode != expected:
            raise ConfigError(
                f"early_stopping.mode: {self.metric} improves towards {expected}, "
                f"found {self.mode!r}"
            )


@dataclass(frozen=True)
class Config:
    name: str = "qg"  # the run's name; the run directory defaults to runs/<name>
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"  # on rank 0; others: WARNING
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    # a loss class, called as loss(outputs, batch.y), or a function f(outputs, batch)
    criterion: DottedPath = "torch.nn.CrossEntropyLoss"
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    testing: EvalConfig = field(default_factory=EvalConfig)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    augmentation: AugmentationSection = field(default_factory=AugmentationSection)  # training only

    @property
    def run_dir(self) -> Path:
        return Path(self.training.path if self.training.path else f"runs/{self.name}")


# --- loading -------------------------------------------------------------------------------------


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """Read a YAML file, apply ``key.path=value`` overrides and return the validated config."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text)  # plain data only: tags that build Python objects are refused
    except yaml.constructor.ConstructorError as e:
        where = f" (line {e.problem_mark.line + 1})" if e.problem_mark else ""
        raise ConfigError(
            f"{path}: YAML tags are not allowed{where}: a config holds plain values and names "
            f"Python objects by dotted path ({' '.join(str(e.problem).split())})"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(e).split())}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: expected a mapping of keys at the top level, found {_kind(raw)}"
        )
    try:
        return config_from_dict(apply_overrides(raw, overrides))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def config_from_dict(raw: Mapping[str, Any]) -> Config:
    return _build(Config, raw, "")


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain YAML-safe dict (tuples become lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(config))


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set; values are parsed as YAML."""
    result = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise ConfigError(f"override {item!r}: expected key.path=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"{key}: override value {text!r} is not valid YAML") from None
        node = result
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"{key}: {where} is {_kind(child)}, not a section")
            node = child
        node[parts[-1]] = value
    return result


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
            if e.name and module_name.startswith(e.name):
                continue  # this prefix is not a module; try a shorter one
            raise ConfigError(f"{key}: importing {module_name!r} failed: {e}") from None
        except Exception as e:  # the user's module itself is broken
            raise ConfigError(f"{key}: importing {module_name!r} failed: {e!r}") from None
        break
    else:
        raise ConfigError(f"{key}: cannot import {dotted!r} (no module named {parts[0]!r})")
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


# --- the schema walker ---------------------------------------------------------------------------


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{prefix.rstrip('.') or 'config'}: expected a section (mapping), found {_kind(raw)}"
        )
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            raise ConfigError(f"{prefix}{key}: unknown key (known here: {', '.join(fields)}){hint}")
    values = {}
    for name, f in fields.items():
        key = prefix + name
        if name in raw:
            value = _convert(hints[name], raw[name], key)
            check = f.metadata.get("check")
            if check is not None and value is not None and not check(value):
                raise ConfigError(f"{key}: expected {f.metadata['expected']}, found {value!r}")
            values[name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: required key is missing")
    obj = cls(**values)
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        text = _convert(args[0], value, key)
        resolve(text, key=key)  # fail now, at load time, if it does not import
        return text
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".")
    if origin is Literal:
        if isinstance(value, int) and not isinstance(value, bool) and str(value) in args:
            value = str(value)  # precision: 32 in YAML is the integer 32
        if value not in args:
            raise ConfigError(
                f"{key}: expected one of {', '.join(map(str, args))}, found {value!r}"
            )
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, found {_kind(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} items, found {list(value)}")
        return tuple(
            _convert(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, found {_kind(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, found {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, found {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, found {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {key}")  # a schema bug, not user error


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list {value!r}"
    return f"{type(value).__name__} {value!r}"


def _deep_copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
