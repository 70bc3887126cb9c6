"""How a distributed run holds the model on its ranks (``parallel.strategy``).

A strategy is the one object the trainer asks about everything that depends on it: it builds
the optimizer, wraps the model for training, says how a micro-batch skips the gradient
exchange, and turns the optimizer's state into the plain state dict a checkpoint holds (and
back). The trainer keeps its loop and hooks; it never branches on the strategy's name.

- ``ddp``: every rank holds the whole model, its gradients and its optimizer state; DDP averages
  the gradients (through a communication hook: gloo's, or the shared-memory exchange).
- ``zero``: the same, but each rank keeps the optimizer state of its part of the parameters
  only (``ZeroRedundancyOptimizer``): after its step, each rank broadcasts its part.
- ``fsdp``: parameters, gradients and optimizer state all split over the ranks (FSDP2's
  ``fully_shard``, unit by unit: each unit's parameters are gathered for its forward and
  backward, then freed). Evaluation runs on a plain copy gathered from the shards.

Checkpoints hold what a one-process run would: the whole model's ``state_dict`` and the plain
optimizer's (parameters numbered in the model's order), gathered to rank 0, so any strategy and
any number of processes resumes any other's. Gradient clipping needs nothing of the strategy:
under ddp and zero every rank holds the whole averaged gradient, and fsdp's sharded gradients
(DTensors) give ``clip_grad_norm_`` the norm over every rank's part.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import distributed


class Strategy:
    """``ddp`` (and what one process does): the whole model and optimizer on every rank."""

    name = "ddp"
    replicated = True  # every rank holds the same whole parameters (the monitor compares them)
    micro_batches = 1  # passes per batch of this rank (the invariant strategy cuts batches)
    comm_hook = True  # gradients averaged by DDP, through the hook wrap() is given
    one_thread = False  # whether the run computes on one CPU thread (distributed.one_thread)

    def __init__(self, device: torch.device):
        self.device = device

    def prepare(self, *modules: nn.Module) -> Iterable[nn.Parameter]:
        """Before the optimizer is built: ``modules`` (the model, and its moving average) as
        the strategy holds them; the parameters of the first, for the optimizer."""
        return modules[0].parameters()

    def grad_scaler(self, enabled: bool) -> torch.amp.GradScaler:
        """float16's gradient scaler (skips a step whose gradients overflowed on any rank)."""
        return torch.amp.GradScaler(self.device.type, enabled=enabled)

    def model_state(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """``module``'s whole, plain state dict (every rank calls it; rank 0's is written)."""
        return module.state_dict()

    def load_model_state(self, module: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load a whole, plain state dict (every rank has it)."""
        module.load_state_dict(state)

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load the plain optimizer state dict :meth:`optimizer_state` made (every rank)."""
        optimizer.load_state_dict(state)

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

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        return cls(params, **kwargs)

    def wrap(self, model: nn.Module, *, find_unused_parameters: bool, hook: Callable) -> nn.Module:
        """The module the training pass calls: ``model`` in DDP, averaging through ``hook``."""
        wrapped = DistributedDataParallel(
            model,  # already on self.device
            device_ids=distributed.ddp_device_ids(self.device),
            find_unused_parameters=find_unused_parameters,
        )
        wrapped.register_comm_hook(None, hook)
        return wrapped

    def no_sync(self, wrapped: nn.Module) -> contextlib.AbstractContextManager:
        """Around a micro-batch that does not step: its gradients are kept, not exchanged."""
        return wrapped.no_sync()

    def optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        """The plain optimizer state dict on rank 0 (None on the others); every rank calls it."""
        return optimizer.state_dict() if distributed.is_main() else None

    # --- micro-batches (the invariant strategy's; one step of whole batches here) ----------

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


class InvariantStrategy(Strategy):
    """``parallel.invariant``: the same gradients, to the bit, on any number of processes.

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

    def __init__(self, device: torch.device, world_size: int, *, seed: int, shards: int):
        super().__init__(device)
        self.world_size, self.rank = world_size, distributed.get_rank()
        self.seed, self.micro_batches = seed, shards // world_size
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def before_forward(self, step: int, index: int) -> None:
        # Dropout draws from (seed, step, micro-batch), whichever rank computes it: batch
        # ``a`` of the step, micro-batch j = rank + W * m of the global batch's shards.
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
        # every rank's micro-batch sums, added in the order of the shards: j = r + W * m
        parts = distributed.all_gather(sums.contiguous())  # [W * micro, ...], rank by rank
        by_shard = parts.view(self.world_size, self.micro_batches, *sums.shape[1:]).transpose(0, 1)
        total = torch.zeros_like(sums[0])
        for part in by_shard.reshape(-1, *sums.shape[1:]):
            total += part
        return total

    def wrap(self, model: nn.Module, *, find_unused_parameters: bool, hook: Callable) -> nn.Module:
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


class ZeroStrategy(Strategy):
    """``zero``: DDP, with each rank holding the optimizer state of a 1/W share of the
    parameters (split by size, whole parameters each)."""

    name = "zero"

    def optimizer(
        self, cls: type[torch.optim.Optimizer], params: Iterable[nn.Parameter], kwargs: dict
    ) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer  # its import takes 0.5 s

        return ZeroRedundancyOptimizer(list(params), optimizer_class=cls, **kwargs)

    def optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        # Every rank sends its share to rank 0, whose state_dict is then the plain optimizer's:
        # parameters numbered in the model's order, so a ddp run (or one process) loads it,
        # and load_state_dict of such a dict keeps each rank's share.
        optimizer.consolidate_state_dict(to=0)
        return optimizer.state_dict() if distributed.is_main() else None


Units = Callable[[nn.Module], list[nn.Module | list[nn.Module]]]


class FSDPStrategy(Strategy):
    """``fsdp``: each rank holds 1/W of every parameter, its gradient and its optimizer state.

    ``units(module)``: the submodules (or groups of them) sharded as units of their own, each
    gathered whole only while it runs; the rest of the model is the root unit. ``param_dtype``:
    the dtype units compute in (bfloat16 or float16 with ``training.precision`` bf16 / 16;
    None: the parameters' own); gradients are reduced in float32.
    """

    name = "fsdp"
    replicated = False
    comm_hook = False  # gradients reduce-scattered by FSDP's own collectives

    def __init__(self, device: torch.device, units: Units, param_dtype: torch.dtype | None):
        super().__init__(device)
        self.units, self.param_dtype = units, param_dtype
        self._templates: dict[int, nn.Module] = {}  # by id of a sharded module: its structure
        self._copies: dict[int, tuple[int, nn.Module]] = {}  # gathered: (step, plain copy)

    def prepare(self, *modules: nn.Module) -> Iterable[nn.Parameter]:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (distributed.get_world_size(),))
        # gradients reduced in float32 under mixed precision, else in the parameters' dtype
        reduce = torch.float32 if self.param_dtype is not None else None
        policy = MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=reduce)
        for module in modules:
            # the structure, without memory, for plain copies to evaluate and test with
            self._templates[id(module)] = copy.deepcopy(module).to("meta")
            for unit in self.units(module):
                fully_shard(unit, mesh=mesh, mp_policy=policy)
            fully_shard(module, mesh=mesh, mp_policy=policy)
        return modules[0].parameters()

    def wrap(self, model: nn.Module, *, find_unused_parameters: bool, hook: Callable) -> nn.Module:
        return model  # sharded by prepare; it exchanges its gradients itself

    @contextlib.contextmanager
    def no_sync(self, wrapped: nn.Module):
        wrapped.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)

    def grad_scaler(self, enabled: bool) -> torch.amp.GradScaler:
        # Each rank sees only its shards' gradients: the overflow check is all-reduced, so
        # that every rank skips the same steps.
        return _sharded_scaler(self.device.type, enabled)

    def _options(self, *, everywhere: bool) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=not everywhere)

    def model_state(self, module: nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module, options=self._options(everywhere=False))

    def load_model_state(self, module: nn.Module, state: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        # (it replaces the dict's tensors by shards: a copy of the dict keeps the caller's)
        set_model_state_dict(module, dict(state), options=self._options(everywhere=True))

    def optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any] | None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(model, optimizer, options=self._options(everywhere=False))
        if not distributed.is_main():
            return None
        # keyed by parameter name; the plain optimizer numbers them in the model's order
        number = {name: i for i, (name, _) in enumerate(model.named_parameters())}
        return _renumber(state, number)

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        name = dict(enumerate(name for name, _ in model.named_parameters()))
        set_optimizer_state_dict(
            model, optimizer, _renumber(state, name), options=self._options(everywhere=True)
        )

    def evaluation_module(self, module: nn.Module, step: int) -> nn.Module:
        if id(module) not in self._templates:
            return module
        cached = self._copies.get(id(module))
        if cached is None or cached[0] != step:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            # gathered on every rank (any of them may evaluate), kept until release()
            state = get_model_state_dict(module, options=self._options(everywhere=True))
            plain = self.plain_copy(module)
            plain.load_state_dict(state)
            cached = self._copies[id(module)] = (step, plain.train(module.training))
        return cached[1]

    def plain_copy(self, module: nn.Module) -> nn.Module:
        template = self._templates.get(id(module))
        if template is None:
            return copy.deepcopy(module)
        return copy.deepcopy(template).to_empty(device=self.device)

    def release(self) -> None:
        self._copies.clear()


def _sharded_scaler(device_type: str, enabled: bool) -> torch.amp.GradScaler:
    """torch's ShardedGradScaler, whose overflow flag has the shape a fused optimizer takes."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    class Scaler(ShardedGradScaler):
        # Its overflow flag has shape (1,), on which fused Adam/AdamW (the shipped configs')
        # fail ("output with shape [] doesn't match the broadcast shape [1]"; pytorch issue
        # 140514), and after its all-reduce (a sum) it counts the ranks that overflowed, while
        # the fused CPU kernel skips a step only for a flag of exactly 1: a step whose
        # gradients overflowed on two ranks was taken, and the weights became NaN. Made here
        # what torch's own scaler makes: 0 or 1, of shape ().
        def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
            super().unscale_(optimizer)
            state = self._per_optimizer_states[id(optimizer)]
            flags = state["found_inf_per_device"]
            state["found_inf_per_device"] = {
                d: (t.reshape(()) > 0).to(t.dtype) for d, t in flags.items()
            }

    return Scaler(device_type, enabled=enabled)


def _renumber(state: dict[str, Any], key: dict) -> dict[str, Any]:
    """An optimizer state dict with its parameters' keys mapped through ``key``."""
    groups = [
        {**group, "params": [key[p] for p in group["params"]]} for group in state["param_groups"]
    ]
    return {"state": {key[p]: v for p, v in state["state"].items()}, "param_groups": groups}


def make_strategy(
    name: str,
    device: torch.device,
    *,
    units: Units | None = None,
    param_dtype: torch.dtype | None = None,
    seed: int = 0,
    shards: int = 1,
) -> Strategy:
    """The strategy ``parallel.strategy`` names, for the processes of a distributed run;
    ``units`` and ``param_dtype``: fsdp's (see :class:`FSDPStrategy`)."""
    if name == "fsdp":
        return FSDPStrategy(device, units or (lambda module: []), param_dtype)
    if name == "invariant":
        world_size = distributed.get_world_size()
        return InvariantStrategy(device, world_size, seed=seed, shards=shards)
    return {"ddp": Strategy, "zero": ZeroStrategy}[name](device)
