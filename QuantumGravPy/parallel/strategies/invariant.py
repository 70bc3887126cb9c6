"""``invariant``: the same gradients, to the bit, on any number of processes."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ...config import Config
from ...config.checks import POSITIVE
from .. import distributed
from .base import ExchangeTimer, Strategy

KEY = "parallel.strategy invariant"
MICRO = "parallel.invariant.micro_batches"


@dataclass(frozen=True)
class InvariantSettings:
    # each global batch is cut into this many fixed micro-batches (any number of processes
    # dividing it gives the same bits; training.global_batch_size is a multiple of it); each
    # is a forward and backward pass. Was parallel.micro_batches, and before parallel.shards
    micro_batches: int = field(default=12, metadata=POSITIVE)


class InvariantStrategy(Strategy):
    """The same weights, history and predictions, bit for bit, on any number of processes that
    divides ``parallel.invariant.micro_batches``: each global batch is cut into that many fixed
    micro-batches, whose gradients are added exactly and in a fixed order (docs:
    Reproducibility). Needs ``training.global_batch_size``, a multiple of it.

    Refuses a `training.global_batch_size` that is missing or not a multiple of
    `micro_batches`, a number of processes that does not divide it, `training.batch_nodes`,
    `model.norm: batch`, `augmentation.seeding: per_rank` and `validation.mode: sharded`.

    Every micro-batch's gradient is kept apart (:meth:`after_backward`), and the step's are
    added exactly: each parameter's gradients are put on one fixed-point grid, chosen from
    their largest magnitude over every rank (an exact maximum), as 64-bit integers; integers
    add exactly, in any order and grouping, so the all-reduced sum is the same whatever the
    number of processes, and the result is rounded back once. The grid keeps 62 bits below
    the largest value, less the bits the number of micro-batches needs: finer than the float32
    sum it replaces for every gradient within 2^30 of the largest.
    """

    name = "invariant"
    comm_hook = False  # no DDP: the exchange is exact and explicit
    # The passes too: a CPU matrix product's last bits can depend on the number of threads,
    # which differs with the number of processes sharing the machine.
    one_thread = True
    invariant = True
    cuts_batches = True
    Settings = InvariantSettings

    def __init__(self, device: torch.device, world_size: int, *, seed: int, micro_batches: int):
        super().__init__(device)
        self.world_size, self.rank = world_size, distributed.get_rank()
        self.seed, self.micro_batches = seed, micro_batches // world_size
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    @classmethod
    def refusals(cls, config: Config, world_size: int) -> Iterator[str]:
        yield from super().refusals(config, world_size)
        t, micro = config.training, cls.settings(config).micro_batches
        if t.batch_nodes is not None:
            yield (
                f"{KEY}: not with training.batch_nodes (its batches hold varying numbers of "
                "graphs; invariance cuts fixed micro-batches): use training.global_batch_size"
            )
        elif t.global_batch_size is None:
            yield (
                f"{KEY}: needs training.global_batch_size (the graphs per batch over all "
                f"processes, a multiple of {MICRO} {micro}), not a per-process "
                "batch_size"
            )
        elif t.global_batch_size % micro:
            yield (
                f"{KEY}: training.global_batch_size {t.global_batch_size} is not a multiple of "
                f"{MICRO} {micro} (each batch is cut into {micro} equal "
                "micro-batches)"
            )
        if config.model.norm == "batch":
            yield (
                f"{KEY}: not with model.norm batch (BatchNorm's running statistics follow the "
                "micro-batches each process sees); use graph, layer or none"
            )
        if config.augmentation.preset is not None and config.augmentation.seeding == "per_rank":
            yield (
                f"{KEY}: not with augmentation.seeding per_rank (its draws depend on the rank); "
                "use per_sample"
            )
        if config.validation.mode != "rank0":
            yield (
                f"{KEY}: needs validation.mode rank0 (sharded validation adds each process's "
                "sums in an order that depends on their number)"
            )
        if micro % world_size:
            yield (
                f"{KEY}: {MICRO} {micro} micro-batches do not divide over "
                f"{world_size} processes; use a number of processes that divides {micro}"
            )

    @classmethod
    def note(cls, config: Config) -> str:
        micro = cls.settings(config).micro_batches
        return (
            f"{KEY}: the same bits on any number of processes dividing {micro} ({micro} "
            f"micro-batches of {config.training.global_batch_size // micro} graphs per batch)"
        )

    @classmethod
    def from_config(
        cls, config: Config, device: torch.device, *, compute_dtype: torch.dtype | None = None
    ) -> InvariantStrategy:
        world_size = distributed.get_world_size()
        micro = cls.settings(config).micro_batches
        return cls(device, world_size, seed=config.training.seed, micro_batches=micro)

    def before_forward(self, step: int, index: int) -> None:
        # Dropout draws from (seed, step, micro-batch), whichever rank computes it: batch
        # ``a`` of the step, micro-batch j = rank + W * m of the global batch's.
        a, m = divmod(index, self.micro_batches)
        j = self.rank + self.world_size * m
        key = hashlib.sha256(f"{self.seed}:{step}:{a}:{j}".encode()).digest()
        seed = int.from_bytes(key[:8], "little") >> 1
        # the generators a forward pass draws from: the CPU's and the device's (not
        # torch.manual_seed, which costs a millisecond a call)
        torch.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            torch.cuda.default_generators[self.device.index or 0].manual_seed(seed)

    def fold(self, sums: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor]):
        # every rank's micro-batch sums, added in the order of the micro-batches: j = r + W * m
        parts = distributed.all_gather(sums.contiguous())  # [W * micro, ...], rank by rank
        in_order = parts.view(self.world_size, self.micro_batches, *sums.shape[1:]).transpose(0, 1)
        total = torch.zeros_like(sums[0])
        for part in in_order.reshape(-1, *sums.shape[1:]):
            total += part
        return total

    def wrap(
        self,
        model: nn.Module,
        *,
        find_unused_parameters: bool,
        hook: Callable,
        timer: ExchangeTimer,
    ) -> nn.Module:
        self.timer = timer  # times the exchange below
        return model

    def no_sync(self, wrapped: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def step_graphs(self, graphs: int) -> int:
        return graphs * self.world_size  # every rank's share is the same size

    def after_backward(self, model: nn.Module) -> None:
        # one flat float64 copy of this micro-batch's gradients (zeros where a parameter had
        # none), and which parameters had one
        params = list(model.parameters())
        self.kept.append(
            (
                torch.cat([_flat(p.grad, p) for p in params]),
                torch.tensor(
                    [p.grad is not None for p in params], dtype=torch.float64, device=self.device
                ),
            )
        )
        for p in params:
            p.grad = None

    def exchange(self, model: nn.Module) -> None:
        params = list(model.parameters())
        # the two collectives below, timed as the exchange (8 bytes per element and parameter)
        nbytes = 8 * (sum(p.numel() for p in params) + 2 * len(params))
        timed = self.timer.exchange if self.timer is not None else None
        with timed(nbytes, in_backward=False) if timed else contextlib.nullcontext():
            self._exchange(params)

    def _exchange(self, params: list[nn.Parameter]) -> None:
        kept, self.kept = self.kept, []
        sizes = [p.numel() for p in params]
        owner = torch.repeat_interleave(
            torch.arange(len(params), device=self.device), torch.tensor(sizes, device=self.device)
        )
        # each parameter's largest magnitude, and whether any micro-batch gave it a gradient,
        # over every rank: one exact maximum (NaN if any gradient was NaN). Every rank has as
        # many micro-batches as this one.
        largest = torch.zeros(2, len(params), dtype=torch.float64, device=self.device)
        for flat, has in kept:
            largest[0] = largest[0].scatter_reduce(0, owner, flat.abs(), "amax")
            largest[1] = torch.maximum(largest[1], has)
        distributed.all_reduce_max(largest)
        largest, present = largest[0], largest[1].tolist()
        micro = len(kept) * self.world_size
        # 2^e > each parameter's largest magnitude; micro of them fit in 2^62 on a grid of
        # 2^(e - bits): shift by bits - e
        bits = 62 - max(micro - 1, 1).bit_length()
        finite = torch.isfinite(largest)
        exponent = torch.frexp(torch.where(finite, largest, 0.0)).exponent
        shift = (bits - exponent)[owner]
        total = torch.zeros(len(owner), dtype=torch.int64, device=self.device)
        for flat, _ in kept:
            total += torch.round(torch.ldexp(flat, shift)).long()
        distributed.all_reduce_sum(total)
        whole = torch.ldexp(total.double(), -shift)
        for i, (p, part) in enumerate(zip(params, whole.split(sizes), strict=True)):
            if not present[i]:  # unused in every micro-batch: no gradient, as under DDP
                continue
            if not bool(finite[i]):  # non-finite: the step is skipped or stops the run
                p.grad = torch.full_like(p, float(largest[i]))
                continue
            p.grad = part.view_as(p).to(p.dtype)


def _flat(grad: torch.Tensor | None, param: torch.Tensor) -> torch.Tensor:
    if grad is None:
        return torch.zeros(param.numel(), dtype=torch.float64, device=param.device)
    return grad.detach().reshape(-1).double()
