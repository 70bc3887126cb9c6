"""What every strategy is asked: the :class:`Strategy` base, with DDP's answers.

A strategy is the one object the trainer asks about everything that depends on how the model
is held on the ranks: what of the config it refuses, how a global batch is cut into micro-
batches, how it builds the optimizer and wraps the model, how a micro-batch skips the gradient
exchange, how the exchange is timed for the monitor, and how the optimizer's state becomes the
plain state dict a checkpoint holds (and back). The trainer keeps its loop and hooks; it never
branches on the strategy's name.

Checkpoints hold what a one-process run would: the whole model's ``state_dict`` and the plain
optimizer's (parameters numbered in the model's order), gathered to rank 0, so any strategy and
any number of processes resumes any other's. Gradient clipping needs nothing of the strategy:
under ddp and zero every rank holds the whole averaged gradient, and fsdp's sharded gradients
(DTensors) give ``clip_grad_norm_`` the norm over every rank's part.

A new strategy is one module in this package, or in a module of the user's named by
``extensions``: a subclass with a ``name`` (the value of ``parallel.strategy``), registered when
its module is imported. Keys of its own are a frozen dataclass, its ``Settings``: the config
gives them in the section ``parallel.<name>``, checked as every key is, and the reference docs
list them from the dataclass's comments.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
from torch import nn

from ...config.docs import default_text, field_comments
from ...config.loading import build_section
from ...errors import ConfigError
from ...registry import Registry
from .. import distributed

if TYPE_CHECKING:
    from ...config import Config

STRATEGIES: Registry[Strategy] = Registry("parallel.strategy")


class ExchangeTimer(Protocol):
    """What the monitor offers a strategy whose gradients are not exchanged by DDP's hook."""

    def exchange(self, nbytes: int, *, in_backward: bool) -> contextlib.AbstractContextManager:
        """Around one exchange of ``nbytes``: inside the backward pass (fsdp's reduce-scatter
        of a unit) or after it (an explicit exchange before the step)."""
        ...


class Strategy:
    """What one process does, and DDP's answers: the whole model and optimizer on every rank.

    Subclasses set ``name`` and override what they do differently; the class attributes below
    say what the rest of the run needs to know about them.
    """

    name: ClassVar[str] = ""  # the value of parallel.strategy; a subclass with one is registered
    replicated = True  # every rank holds the same whole parameters (the monitor compares them)
    comm_hook = True  # gradients averaged by DDP, through the hook wrap() is given
    one_thread = False  # whether the run computes on one CPU thread (distributed.one_thread)
    invariant = False  # the same bits on any number of processes
    cuts_batches = False  # whether each batch is cut into fixed micro-batches (the loader's)
    micro_batches = 1  # passes per batch of this rank
    # its own keys, in the section parallel.<name>: a frozen dataclass whose fields have
    # defaults, each with a comment (the reference docs'); None: it has none
    Settings: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name:
            STRATEGIES.add(cls)

    def __init__(self, device: torch.device):
        self.device = device
        self.timer: ExchangeTimer | None = None

    # --- what the config asks of it (class methods: before anything is built) ---------------

    @classmethod
    def summary(cls) -> str:
        """The first paragraph of the class's docstring: what it does (the reference docs')."""
        return _paragraphs(cls)[0]

    @classmethod
    def refused(cls) -> str:
        """The paragraph of the class's docstring that starts "Refuses": what :meth:`refusals`
        says no to, for the reference docs."""
        said = [p for p in _paragraphs(cls) if p.startswith("Refuses ")]
        return said[0].removeprefix("Refuses ") if said else "nothing of its own"

    @classmethod
    def settings(cls, config: Config) -> Any:
        """This strategy's ``Settings`` as ``parallel.<name>`` gives them (defaults where it
        does not); a :class:`ConfigError` naming the key for one that is not its own or not
        valid. None for a strategy without settings."""
        raw = config.parallel.settings.get(cls.name)
        if cls.Settings is None:
            if raw is not None:
                raise ConfigError(f"parallel.{cls.name}: strategy {cls.name} has no settings")
            return None
        return build_section(cls.Settings, raw, f"parallel.{cls.name}")

    @classmethod
    def refusals(cls, config: Config, world_size: int) -> Iterator[str]:
        """One line for each setting of ``config`` this strategy cannot train with on
        ``world_size`` processes, naming the key (the first is raised by :meth:`check`); the
        base refuses the settings of any other strategy."""
        for name in config.parallel.settings:
            if name == cls.name:
                continue
            if name in STRATEGIES.names():
                yield (
                    f"parallel.{name}: the settings of strategy {name}, but parallel.strategy "
                    f"is {cls.name}; remove them or choose that strategy"
                )
                continue
            fields = dataclasses.fields(type(config.parallel))
            known = [f.name for f in fields if not f.metadata.get("sections")]
            close = difflib.get_close_matches(name, [*known, *STRATEGIES.names()], n=1)
            hint = f"; did you mean parallel.{close[0]}?" if close else ""
            yield (
                f"parallel.{name}: unknown key (known here: {', '.join(known)}, and a "
                f"strategy's section: {', '.join(STRATEGIES.names())}){hint}"
            )

    @classmethod
    def check(cls, config: Config, world_size: int) -> None:
        cls.settings(config)
        for refusal in cls.refusals(config, world_size):
            raise ConfigError(refusal)

    @classmethod
    def settings_text(cls) -> str:
        """Its settings for the reference docs: each key, its default and its meaning."""
        if cls.Settings is None:
            return "none"
        comments = field_comments(cls.Settings)
        return "; ".join(
            f"`{f.name}` ({default_text(f)}): {comments.get(f.name, '')}".rstrip(": ")
            for f in dataclasses.fields(cls.Settings)
        )

    @classmethod
    def notices(cls, config: Config, processes: int) -> list[str]:
        """Warnings for the start of a run: what the strategy does not do with this config."""
        return []

    @classmethod
    def note(cls, config: Config) -> str | None:
        """A line for the start of a run saying what the strategy guarantees, if anything."""
        return None

    @classmethod
    def from_config(
        cls,
        config: Config,
        device: torch.device,
        *,
        compute_dtype: torch.dtype | None = None,
    ) -> Strategy:
        """The strategy of this run's processes; ``compute_dtype``: what the run computes in
        (None: the parameters' own dtype; bfloat16 or float16 with ``training.precision`` bf16
        or 16)."""
        return cls(device)

    # --- building --------------------------------------------------------------------------

    def prepare(self, *modules: nn.Module) -> Iterable[nn.Parameter]:
        """Before the optimizer is built: ``modules`` (the model, and its moving average) as
        the strategy holds them; the parameters of the first, for the optimizer."""
        return modules[0].parameters()

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        return cls(params, **kwargs)

    def grad_scaler(self, enabled: bool) -> torch.amp.GradScaler:
        """float16's gradient scaler (skips a step whose gradients overflowed on any rank)."""
        return torch.amp.GradScaler(self.device.type, enabled=enabled)

    def wrap(
        self,
        model: nn.Module,
        *,
        find_unused_parameters: bool,
        hook: Callable,
        timer: ExchangeTimer,
    ) -> nn.Module:
        """The module the training pass calls: ``model`` in DDP, averaging through ``hook``
        (which times each bucket itself); ``timer`` times exchanges made outside a hook."""
        from torch.nn.parallel import DistributedDataParallel

        self.timer = timer
        wrapped = DistributedDataParallel(
            model,  # already on self.device
            device_ids=distributed.ddp_device_ids(self.device),
            find_unused_parameters=find_unused_parameters,
            **self.ddp_options(),
        )
        wrapped.register_comm_hook(None, hook)
        return wrapped

    def ddp_options(self) -> dict[str, Any]:
        """More keyword arguments of ``DistributedDataParallel`` (``bucket_cap_mb``, ...): what a
        strategy that is DDP with other settings overrides."""
        return {}

    def no_sync(self, wrapped: nn.Module) -> contextlib.AbstractContextManager:
        """Around a micro-batch that does not step: its gradients are kept, not exchanged."""
        return wrapped.no_sync()

    # --- state -----------------------------------------------------------------------------

    def model_state(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """``module``'s whole, plain state dict (every rank calls it; rank 0's is written)."""
        return module.state_dict()

    def load_model_state(self, module: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load a whole, plain state dict (every rank has it)."""
        module.load_state_dict(state)

    def optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        """The plain optimizer state dict on rank 0 (None on the others); every rank calls it."""
        return optimizer.state_dict() if distributed.is_main() else None

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load the plain optimizer state dict :meth:`optimizer_state` made (every rank)."""
        optimizer.load_state_dict(state)

    # --- evaluation ------------------------------------------------------------------------

    def evaluation_module(self, module: nn.Module, step: int) -> nn.Module:
        """A module that one rank alone can run forward, with ``module``'s weights after
        optimizer step ``step``: ``module`` itself, unless its parameters are sharded."""
        return module

    def plain_copy(self, module: nn.Module) -> nn.Module:
        """An independent, unsharded copy of ``module``'s structure (its weights are to be
        loaded)."""
        return copy.deepcopy(module)

    def release(self) -> None:
        """Let go of what evaluation gathered (at the start of a training epoch)."""

    # --- a step: micro-batches and the exchange --------------------------------------------

    def step_graphs(self, graphs: int) -> int:
        """What a micro-batch's loss is weighted against: this rank's graphs of the step (DDP
        then averages over the ranks)."""
        return graphs

    def before_forward(self, step: int, index: int) -> None:
        """Before the forward pass of micro-batch ``index`` of optimizer step ``step``."""

    def after_backward(self, model: nn.Module) -> None:
        """After each micro-batch's backward pass."""

    def exchange(self, model: nn.Module) -> None:
        """Before the step: the gradients made whole (DDP has done it in the backward pass)."""

    def fold(self, sums: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor]):
        """An epoch's per-micro-batch training sums ``[micro, ...]`` of this rank, added up
        over micro-batches and (``reduce``) over ranks."""
        return reduce(sums.sum(dim=0))


def alone_notice(name: str) -> str:
    """What a strategy that shares state between processes says of a one-process run."""
    return (
        f"parallel.strategy: {name} shares the optimizer state between processes; with one "
        "process there is nothing to share, and it trains as one process always does"
    )


def strategy_class(config: Config, world_size: int) -> type[Strategy]:
    """The class ``parallel.strategy`` names, once it has checked ``config`` for
    ``world_size`` processes: a :class:`ConfigError` naming the key otherwise."""
    cls = STRATEGIES.get(config.parallel.strategy)
    cls.check(config, world_size)
    return cls


def reference_markdown() -> str:
    """The table of strategies for the documentation, from the registered classes' docstrings
    (the site's build puts it into docs/distributed.md: docs/scripts/tables.py)."""
    lines = [
        "| `parallel.strategy` | what each rank holds and does | its settings "
        "(`parallel.<strategy>.<key>`) | what it refuses |",
        "|---|---|---|---|",
    ]
    for cls in STRATEGIES:
        cells = (cls.summary(), cls.settings_text(), cls.refused())
        lines.append(f"| `{cls.name}` | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _paragraphs(cls: type) -> list[str]:
    """The paragraphs of ``cls``'s docstring, each on one line, in markdown's code quotes."""
    doc = inspect.getdoc(cls) or ""
    return [" ".join(p.split()).replace("``", "`") for p in doc.split("\n\n") if p.strip()]
