"""``fsdp``: parameters, gradients and optimizer state split over the ranks (FSDP2)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...compat.fsdp import default_reduce_scatter
from ...config import Config
from ...config.dotted import resolve
from ...errors import ConfigError
from .. import distributed
from .base import ExchangeTimer, Strategy, alone_notice

KEY = "parallel.fsdp.modules"


@dataclass(frozen=True)
class FSDPSettings:
    # dotted class names of your own model.type's submodules that become units of their own
    # (each gathered whole only while it runs); empty: the units the model names itself (its
    # method shard_units(): the built-in model's blocks and heads), else the whole model is one
    modules: tuple[str, ...] = ()


class FSDPStrategy(Strategy):
    """Each rank holds 1/W of every parameter, its gradient and its optimizer state (FSDP2's
    ``fully_shard``, unit by unit: a unit's parameters are gathered for its forward and backward
    passes, then freed; gradients are reduce-scattered). Evaluation runs on a plain copy
    gathered from the shards.

    Refuses `parallel.find_unused_parameters` (a DDP option: fsdp reduces every gradient it
    has), `training.compile`, and `parallel.fsdp.modules` with the built-in model (which is
    sharded per block and per head).

    ``modules``: dotted class names of the submodules sharded as units of their own; the rest
    of the model is the root unit. ``compute_dtype``: the dtype units compute in (bfloat16 or
    float16 with ``training.precision`` bf16 / 16; None: the parameters' own); gradients are
    reduced in float32.
    """

    name = "fsdp"
    replicated = False
    comm_hook = False  # gradients reduce-scattered by FSDP's own collectives
    Settings = FSDPSettings

    def __init__(
        self,
        device: torch.device,
        modules: tuple[str, ...] = (),
        compute_dtype: torch.dtype | None = None,
    ):
        super().__init__(device)
        self.modules, self.param_dtype = modules, compute_dtype
        self._templates: dict[int, nn.Module] = {}  # by id of a sharded module: its structure
        self._copies: dict[int, tuple[int, nn.Module]] = {}  # gathered: (step, plain copy)

    @classmethod
    def refusals(cls, config: Config, world_size: int) -> Iterator[str]:
        yield from super().refusals(config, world_size)
        modules = cls.settings(config).modules
        if modules and config.model.type is None:
            yield (
                f"{KEY}: only for your own model.type; the built-in model is sharded per block "
                f"and per head (found {list(modules)})"
            )
        if config.parallel.find_unused_parameters:
            yield (
                "parallel.find_unused_parameters: a DDP option; fsdp reduces every gradient it "
                "has and needs no search for unused parameters (set it to false)"
            )
        if config.training.compile:
            yield (
                "training.compile: not with parallel.strategy fsdp (compiling sharded units is "
                "not supported here); use ddp or zero, or compile: false"
            )

    @classmethod
    def notices(cls, config: Config, processes: int) -> list[str]:
        return [alone_notice(cls.name)] if processes == 1 else []

    @classmethod
    def from_config(
        cls, config: Config, device: torch.device, *, compute_dtype: torch.dtype | None = None
    ) -> FSDPStrategy:
        return cls(device, cls.settings(config).modules, compute_dtype)

    def units(self, model: nn.Module) -> list[list[nn.Module]]:
        """The submodules of ``model`` sharded as units of their own, innermost first: those
        whose class ``modules`` names, or those the model names itself (``shard_units()``), or
        none. A class the model has no submodule of is refused, naming those it has."""
        if not self.modules:
            own = getattr(model, "shard_units", None)
            return own() if callable(own) else []
        inner = [m for m in model.modules() if m is not model][::-1]  # children before parents
        units = []
        for name in self.modules:
            cls = resolve(name, key=KEY)
            chosen = [m for m in inner if type(m) is cls]
            if not chosen:
                present = sorted({type(m).__name__ for m in inner})
                raise ConfigError(
                    f"{KEY}: the model has no submodule of class {name}; its submodules are "
                    f"{', '.join(present) or 'none'}"
                )
            units += chosen
        return [[m] for m in sorted(units, key=inner.index)]

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

    def wrap(
        self,
        model: nn.Module,
        *,
        find_unused_parameters: bool,
        hook: Callable,
        timer: ExchangeTimer,
    ) -> nn.Module:
        # sharded by prepare; it reduce-scatters its gradients itself, each unit's timed
        from torch.distributed.fsdp import FSDPModule

        self.timer = timer
        scatter = _timed_reduce_scatter(timer)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_custom_reduce_scatter(scatter)
        return model

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


def _timed_reduce_scatter(timer: ExchangeTimer) -> Any:
    """FSDP's own reduce-scatter, each call timed by the monitor as an exchange of the backward
    pass (FSDP2's public hook for a custom collective)."""

    class TimedReduceScatter(default_reduce_scatter()):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            nbytes = input_tensor.numel() * input_tensor.element_size()
            with timer.exchange(nbytes, in_backward=True):
                return super().__call__(output_tensor, input_tensor, group, op, async_op)

    return TimedReduceScatter()


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
