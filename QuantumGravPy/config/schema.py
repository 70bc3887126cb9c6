"""The typed configuration: one tree of frozen dataclasses, validated once when it is loaded.

Defaults live here and nowhere else. The comment beside each field is its documentation (docs/
config.md is generated from it: :mod:`.docs`). Checks of several values of a section are its
``validate`` method; types, ranges and unknown keys are checked by the loader (:mod:`.loading`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..errors import ConfigError
from .checks import NON_NEGATIVE, POSITIVE, PROBABILITY, value_check
from .data import DataConfig
from .dotted import DottedPath, resolve
from .hooks import CallbackConfig
from .objects import check_objects
from .optim import OptimizerConfig, SchedulerConfig
from .tasks import TaskConfig
from .watching import MonitorConfig, TrackingConfig

_check, _POSITIVE, _NON_NEGATIVE, _PROBABILITY = value_check, POSITIVE, NON_NEGATIVE, PROBABILITY


@dataclass(frozen=True)
class ModelConfig:
    # null: the built-in GNNModel, set up by the keys below; or a dotted path to your own
    # nn.Module class, built as cls(in_channels=N, outputs={task: (num_outputs, level)},
    # **model.kwargs), whose forward(batch) returns {task: tensor} (or one tensor)
    type: DottedPath | None = None
    # keyword arguments of model.type; a value {class: dotted.path, kwargs: {...}} is built
    # as an instance of that class, {object: dotted.path} passes the object itself (a class, a
    # function), at any depth (docs: Training)
    kwargs: dict[str, Any] = field(default_factory=dict)
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
    # concatenated; std: the spread of the elements; none of the defaults grows with n (an
    # untrained model starts near chance at any size); max, add (the sum) and scaled_add
    # (the sum / sqrt(n)) do
    pooling: tuple[Literal["mean", "max", "add", "scaled_add", "std"], ...] = ("mean", "std")
    head_channels: tuple[int, ...] = (64,)  # hidden layers of the MLP head
    # graph-level Data attributes (a number or a vector per graph) concatenated to the pooled
    # node embeddings before the head, e.g. [num_elements]; built-in model only
    graph_features: tuple[str, ...] = ()
    # node-level heads see each node's embedding and its graph's read-out (pooling and
    # graph_features): a quantity smooth over a large graph is seen by the whole graph
    node_context: bool = False
    # recompute each message-passing block's activations in the backward pass instead of
    # keeping them (torch.utils.checkpoint): less memory for large graphs, one more forward
    activation_checkpointing: bool = False
    # start from trained weights: a run directory (its checkpoints/best.pt), a checkpoint, or a
    # model's state dict saved with torch.save; a new run, unlike --resume (which continues one)
    init_from: str | None = None
    # with init_from: every tensor of the model must be there, in its shape; false: load those
    # that fit, leave the others as built (a new head, say) and name them in the log
    init_strict: bool = True
    # the batch attributes your own model.type reads, e.g. [x, edge_index]: training batches
    # hold those and the tasks' targets alone; null: every attribute, unless the model says
    # (an attribute reads); the built-in model says what it reads itself
    reads: tuple[str, ...] | None = None
    in_channels: int | None = None  # node features; null: taken from the dataset
    num_classes: int | None = None  # null: taken from the dataset

    # what each key of the built-in model alone is instead, for your own model.type
    BUILT_IN_ONLY: ClassVar[dict[str, str]] = {
        "graph_features": "your own model.type reads any attribute of the batch itself",
        "node_context": "your own model.type builds its node-level heads itself",
        "activation_checkpointing": (
            "your own model.type can call torch.utils.checkpoint in its forward"
        ),
        **dict.fromkeys(
            (
                "conv",
                "conv_kwargs",
                "hidden_channels",
                "num_layers",
                "activation",
                "dropout",
                "residual",
                "norm",
                "pooling",
                "head_channels",
            ),
            "your own model.type is set up by model.kwargs",
        ),
    }

    def validate(self) -> None:
        if self.type is not None:
            defaults = ModelConfig()
            for key, instead in self.BUILT_IN_ONLY.items():
                value = getattr(self, key)
                if value != getattr(defaults, key):
                    shown = list(value) if isinstance(value, tuple) else value
                    raise ConfigError(
                        f"model.{key}: only for the built-in model, and would be ignored with "
                        f"model.type {self.type} ({instead}; found {shown!r}); remove it (on "
                        "the command line, model={type: ..., kwargs: {...}} replaces the whole "
                        "section)"
                    )
        if self.reads is not None and self.type is None:
            raise ConfigError(
                "model.reads: only for your own model.type; the built-in model says what it "
                f"reads itself (found {list(self.reads)})"
            )
        if self.kwargs and self.type is None:
            raise ConfigError(
                "model.kwargs: only for your own model.type; the built-in model is set up by the "
                f"other model keys (found {self.kwargs})"
            )
        check_objects(self.kwargs, "model.kwargs")
        if not self.pooling:
            raise ConfigError(
                "model.pooling: expected at least one of mean, max, add, scaled_add, std, found []"
            )
        if any(c <= 0 for c in self.head_channels):
            raise ConfigError(
                f"model.head_channels: expected positive sizes, found {list(self.head_channels)}"
            )


@dataclass(frozen=True)
class GradientClipConfig:
    # rescale the gradients so that their norm over all of the model's parameters (whichever
    # rank holds them) is at most this, once per optimizer step, after float16's unscaling
    max_norm: float | None = field(default=None, metadata=_POSITIVE)
    norm_type: float = field(default=2.0, metadata=_POSITIVE)  # of that norm; .inf: largest
    value: float | None = field(default=None, metadata=_POSITIVE)  # or clip each element

    def validate(self) -> None:
        if (self.max_norm is None) == (self.value is None):
            raise ConfigError(
                "training.gradient_clip: give either max_norm (and norm_type) or value, "
                f"found max_norm {self.max_norm} and value {self.value}"
            )


@dataclass(frozen=True)
class TrainingConfig:
    seed: int = 0  # model initialisation and the order of training batches
    device: str = "auto"  # auto, cpu, cuda or cuda:N
    path: str | None = None  # the run directory; null: runs/<name>
    num_epochs: int = field(default=30, metadata=_POSITIVE)  # at most (early stopping)
    batch_size: int = field(default=32, metadata=_POSITIVE)  # per process
    # graphs per batch over all W processes, 1/W each (batch_size ignored): the same steps on W
    global_batch_size: int | None = field(default=None, metadata=_POSITIVE)
    # nodes per batch and process instead of a number of graphs: batches of equal work, split
    # evenly between the processes, whatever the sizes (docs: Data, Large causal sets)
    batch_nodes: int | None = field(default=None, metadata=_POSITIVE)
    drop_last: bool = False  # drop each epoch's last, smaller batch (a world-size condition)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)  # the optimizer
    lr_scheduler: SchedulerConfig | None = None  # null: a constant learning rate
    num_workers: int = field(default=0, metadata=_NON_NEGATIVE)  # data-loading worker processes
    checkpoint_every: int = field(default=0, metadata=_NON_NEGATIVE)  # 0: only best and last
    # also keep the k best epochs' checkpoints (by early_stopping.metric), as
    # checkpoints/best_epoch_NNNN.pt; 1: best.pt alone
    keep_best: int = field(default=1, metadata=_POSITIVE)
    callbacks: tuple[CallbackConfig, ...] = ()  # called at points of the run (docs: Training)
    # null (shuffle), class_balanced, progressive, weighted (graph attribute "weight"), or a
    # dotted path to f(dataset, **sampler_kwargs) -> Sampler; distributed automatically
    sampler: str | None = None
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {num_samples: 5000}
    # optimizer steps every N batches; gradients of the others are kept, not synchronised
    accumulate_grad_batches: int = field(default=1, metadata=_POSITIVE)
    # "32": float32; "bf16" or "16": autocast (16 adds a gradient scaler); "64": float64 weights
    # and data, which keep runs on different process counts together far longer (docs)
    precision: Literal["32", "bf16", "16", "64"] = "32"
    # on a GPU, float32 matmuls in TF32 (faster, ~1e-3 relative error); never under invariant
    tf32: bool = True
    # null: no average; e.g. 0.999: validation and test use an exponential moving average
    ema_decay: float | None = field(
        default=None, metadata=_check(lambda v: 0 < v < 1, "a number in (0, 1)")
    )
    # null: none; {max_norm: 1.0} (norm over all parameters, norm_type 2) or {value: 0.5}
    gradient_clip: GradientClipConfig | None = None
    # torch.compile the model (its first batches take longer); checkpoints keep plain keys
    compile: bool = False
    # with batch_nodes: batches padded to fixed nodes, edges and graphs, so a compiled step is
    # compiled once (on a GPU: CUDA graphs, replayed); results change only by rounding
    pad_batches: bool = False
    # draw the run's pictures; false saves a second a run (`qg plot RUN` draws them later)
    plots: bool = True

    def validate(self) -> None:
        if self.batch_nodes is not None and self.global_batch_size is not None:
            raise ConfigError(
                "training.batch_nodes: not with training.global_batch_size (one counts nodes per "
                "process, the other graphs over all processes): give one"
            )
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
    # jobs on several hosts: the network interface that joins them (eth0, ib0), for gloo's and
    # NCCL's sockets (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); null: as they find it
    interface: str | None = None
    # Average gradients through shared memory when all ranks are CPU processes on one x86-64
    # machine (much less waiting than gloo on busy cores; the same numbers). false: always gloo.
    shared_memory: bool = True
    # how the model is held on the ranks: the name of a strategy (docs: Distributed lists what
    # each does and refuses, from their classes), one of your own among them (docs:
    # Extending). Checkpoints hold full state dicts whatever it is: any strategy and number of
    # processes resumes any other's
    strategy: str = "ddp"
    # the chosen strategy's own keys, in a section named after it (parallel.fsdp.modules,
    # parallel.invariant.micro_batches); its class declares and checks them, and Distributed
    # lists each strategy's. A section of a strategy not chosen is refused
    settings: dict[str, dict] = field(default_factory=dict, metadata={"sections": "strategy"})


# training.sampler's named samplers (built in data/batches/samplers.py); anything else is a
# dotted path.
SAMPLER_NAMES = ("class_balanced", "progressive", "weighted")


@dataclass(frozen=True)
class AugmentationSection:
    preset: Literal["mild", "moderate", "aggressive"] | None = None  # null: no augmentation
    # per_sample: draws keyed by (sample, epoch), the same for any number of processes;
    # per_rank: keyed by rank and world size as well
    seeding: Literal["per_sample", "per_rank"] = "per_sample"


@dataclass(frozen=True)
class EarlyStoppingConfig:
    enabled: bool = True  # false: train all epochs, still keep the best checkpoint by metric
    # a column of history.csv (val_loss, val_<task>_<metric>, and with one task val_<metric>;
    # train_loss, train_accuracy) or a list of them, each followed the way it improves; the
    # first picks best.pt, its ties broken by the second (default: val_loss)
    metric: str | tuple[str, ...] = "val_loss"
    # with several metrics: stop once any of them has stopped improving, or once all have
    combine: Literal["any", "all"] = "any"
    mode: Literal["min", "max"] = "min"  # of the first metric: min for losses, max for accuracy
    patience: int = field(default=8, metadata=_POSITIVE)  # epochs without improvement
    delta: float = field(default=0.0, metadata=_NON_NEGATIVE)  # smallest change that counts
    grace_period: int = field(default=0, metadata=_NON_NEGATIVE)  # epochs before it may stop

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) if isinstance(self.metric, str) else tuple(self.metric)

    def validate(self) -> None:
        metrics = self.metrics
        if not metrics or len(set(metrics)) != len(metrics):
            raise ConfigError(
                f"early_stopping.metric: expected a column name or a list of different ones, "
                f"found {list(metrics)}"
            )


@dataclass(frozen=True)
class Config:
    name: str = "qg"  # the run's name; the run directory defaults to runs/<name>
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"  # on rank 0; others: WARNING
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    # what the model learns: a list of tasks (see "Tasks and metrics" in the docs: Training);
    # empty: one classification of each graph's y, whose loss is criterion
    tasks: tuple[TaskConfig, ...] = ()
    # without tasks: a loss class, called as loss(outputs, batch.y), or a function
    # f(outputs, batch)
    criterion: DottedPath = "torch.nn.CrossEntropyLoss"
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    testing: EvalConfig = field(default_factory=EvalConfig)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    augmentation: AugmentationSection = field(default_factory=AugmentationSection)  # training only
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # watching runs live
    monitor: MonitorConfig = field(default_factory=MonitorConfig)  # inside every run
    # modules of your own, imported before the rest of the config is read (and in every
    # process of a job): each registers the task kinds, metrics, strategies and file formats
    # it defines, which the config may then name (docs: Extending)
    extensions: tuple[str, ...] = ()

    @property
    def run_dir(self) -> Path:
        return Path(self.training.path if self.training.path else f"runs/{self.name}")
