"""The checks on each step's gradients, kept on the device until they are read.

Every optimizer step the global gradient norm is taken, recorded for history.csv (its mean
and maximum over the steps that were taken) and compared with infinity. None of that is read
on the host during a step: on a GPU a read waits for every kernel queued before it, so the
host could never run ahead and queue the next step while the GPU works. The norm's sums, the
count of skipped steps and the first non-finite step (its number, this rank's first
non-finite parameter, its loss) stay on the device, and are read every ``monitor.read_every``
steps and at the end of each training pass, the same step on every rank.

A step whose gradients are not finite is left out exactly, without a read: an optimizer with
a fused kernel (``fused: true`` for Adam, AdamW, SGD, Adagrad) is handed the flag as the
``found_inf`` tensor that gradient scalers hand it, and skips its update on the device. With
any other optimizer, ``monitor.nonfinite: skip`` must read the flag before the step (one read
a step), and ``error`` lets the step run and stops the run when the flag is read, naming the
first step whose gradients were not finite; its checkpoints are from before that step.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..errors import QGError
from ..parallel import distributed

NONE = 2**62  # no parameter: larger than any parameter's index


class TrainingDivergedError(QGError):
    """The training loss or the gradients became NaN or infinite."""


class NonFiniteGradientError(TrainingDivergedError):
    """A step's gradients were NaN or infinite (``monitor.nonfinite: error``)."""


def masks_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` skips its update when handed a ``found_inf`` flag of 1 (torch's
    fused kernels do), so that a step can be left out without reading the flag on the host.

    Not fused SGD with momentum: its first step makes the momentum buffers with
    ``empty_like`` and lets the kernel fill them, so a first step left out would leave them
    uninitialised for the next."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return False
    if isinstance(optimizer, torch.optim.SGD):
        return not any(group.get("momentum", 0) for group in optimizer.param_groups)
    return type(optimizer).__module__.startswith("torch.optim")


class GradientChecks:
    """One rank's gradient checks: ``bucket`` in DDP's communication hook (this rank's own
    gradients, before they are averaged), ``check`` once a step, ``read`` where the host may
    wait, ``columns`` at the end of an epoch."""

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        world_size: int,
        *,
        nonfinite: str,
        masks: bool,
    ):
        self.model, self.device, self.world_size = model, device, world_size
        self.nonfinite, self.masks = nonfinite, masks
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._index = {id(p): i for i, p in enumerate(self._params)}
        # Under DDP on a CPU the averaged gradients of a step lie in DDP's bucket buffers, in an
        # order DDP chooses (and changes after the first step, and again in a resumed run); a
        # step's norm is taken over one copy of them in the model's order, so that it has the
        # same bits whatever the layout, in two operations rather than one per parameter.
        self._flat: torch.Tensor | None = None
        if world_size > 1 and {(p.device.type, p.dtype) for p in self._params} == {
            ("cpu", torch.float32)
        }:
            self._flat = torch.empty(sum(p.numel() for p in self._params))
        self._views: tuple[tuple | None, list[torch.Tensor]] = (None, [])  # the buffers' params
        self._layouts: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # a bucket's
        self._order_of: dict[tuple, torch.Tensor] = {}  # parameters with gradients, by step
        self._flags: list[tuple[Any, torch.Tensor, torch.Tensor]] = []  # this step's buckets
        self._exchanged: list[tuple[torch.Tensor, Any]] = []  # (a bucket's buffer, the bucket)
        self.last_norm: torch.Tensor | None = None  # the last step's (for tests and tools)
        self.start_epoch()
        self._clear_first()

    def _zero(self, dtype: torch.dtype, value: float = 0) -> torch.Tensor:
        return torch.full((), value, dtype=dtype, device=self.device)

    def start_epoch(self) -> None:
        self._norm_sum = self._zero(torch.float64)
        self._norm_max = self._zero(torch.float64)
        self._norms = self._zero(torch.int64)
        self._steps = 0  # checked this epoch: those not counted in _norms were skipped

    def _clear_first(self) -> None:
        self._bad_step = self._zero(torch.int64, -1)  # the first non-finite step (-1: none)
        self._bad_param = self._zero(torch.int64, NONE)  # this rank's first non-finite one
        self._bad_loss = self._zero(torch.float64)  # this rank's loss in that step

    # --- in DDP's communication hook ---------------------------------------------------------

    def bucket(self, buffer: torch.Tensor, bucket: Any) -> None:
        """A bucket of this rank's own gradients, before the exchange averages them: where
        its first non-finite element is, kept on the device (read only if a step goes wrong)."""
        if self.nonfinite == "error":  # only an error names the rank and the parameter
            finite = torch.isfinite(buffer)
            # argmin of the flags: the first non-finite element (0 when there is none)
            first = finite.view(torch.uint8).argmin()
            self._flags.append((bucket.parameters(), finite.all(), first))
        if self._flat is not None:  # the exchange leaves the average in the buffer
            self._exchanged.append((buffer, bucket))

    # --- once a step -------------------------------------------------------------------------

    def check(self, sums: torch.Tensor, step: int, scaled: bool) -> bool | torch.Tensor:
        """Record this step's gradient norm; returns whether the optimizer may step: True, or
        the flag on the device (for an optimizer that masks its update with it), or the flag
        read on the host (``nonfinite: skip`` with an optimizer that cannot mask).

        Called on every rank after the exchange: the gradients are the averaged ones, the same
        on every rank, so every rank reaches the same answer without a collective. ``scaled``:
        a float16 gradient scaler is on, and skips overflowing steps itself (counted, not
        errors). ``sums``: this rank's training sums of the step (its loss, if it goes wrong).
        """
        exchanged, self._exchanged = self._exchanged, []
        flags, self._flags = self._flags, []
        views = None if self._flat is None or scaled else self._in_model_order(exchanged)
        culprit = None  # this rank's first parameter with a non-finite gradient of its own
        if views is not None:
            norm = torch.linalg.vector_norm(torch.cat(views, out=self._flat))
        else:
            # Per parameter, in the model's order, then over them: the same bits whatever the
            # layout of the gradients in memory, and on a CPU 4x quicker than get_total_norm's
            # grouping by device and dtype.
            which = tuple(i for i, p in enumerate(self._params) if p.grad is not None)
            if which:
                norms = torch.stack([torch.linalg.vector_norm(self._params[i].grad) for i in which])
                if hasattr(norms, "full_tensor"):  # fsdp's shards: each norm over all ranks
                    norms = norms.full_tensor()
                norm = torch.linalg.vector_norm(norms)
                if self.world_size == 1 and self.nonfinite == "error":  # this rank's own
                    culprit = self._first_of(which, norms)
            else:
                norm = self._zero(torch.float32)
        if self.world_size > 1 and self.nonfinite == "error":
            culprit = self._first_in_buckets(flags)
        self.last_norm = norm
        finite = torch.isfinite(norm)
        counted = torch.where(finite, norm.double(), 0.0)
        self._norm_sum += counted
        torch.maximum(self._norm_max, counted, out=self._norm_max)
        self._norms += finite
        self._steps += 1
        if scaled:
            return True  # the scaler sees the same gradients and skips the step itself
        if self.nonfinite == "error":
            first = ~finite & (self._bad_step < 0)
            self._bad_step = torch.where(first, step, self._bad_step)
            if culprit is not None:
                self._bad_param = torch.where(first, culprit, self._bad_param)
            self._bad_loss = torch.where(first, sums[..., 0].sum(), self._bad_loss)
        if self.masks:
            return finite
        if self.nonfinite == "skip":
            return bool(finite)  # the one read a step of an optimizer that cannot mask
        return True

    def _first_of(self, which: tuple[int, ...], norms: torch.Tensor) -> torch.Tensor:
        order = self._order_of.get(which)
        if order is None:
            order = self._order_of[which] = torch.tensor(which, device=norms.device)
        return torch.where(torch.isfinite(norms), NONE, order).min()

    def _first_in_buckets(self, flags: list) -> torch.Tensor | None:
        """This rank's first parameter, in the model's order, with a non-finite element in
        its own gradient, from the buckets' flags (None when no bucket was seen)."""
        first = None
        for params, finite, element in flags:
            key = tuple(id(p) for p in params)
            layout = self._layouts.get(key)
            if layout is None:
                starts = [0]
                for p in params[:-1]:
                    starts.append(starts[-1] + p.numel())
                order = [self._index.get(id(p), NONE) for p in params]
                layout = self._layouts[key] = (
                    torch.tensor(starts, device=element.device),
                    torch.tensor(order, device=element.device),
                )
            starts, order = layout
            at = torch.searchsorted(starts, element.reshape(1), right=True) - 1
            here = torch.where(finite, NONE, order[at][0])
            first = here if first is None else torch.minimum(first, here)
        return first

    def _in_model_order(self, exchanged: list) -> list[torch.Tensor] | None:
        """Each parameter's averaged gradient, a view into the step's bucket buffers, in the
        model's order (None unless every parameter was exchanged).

        The buffers stay the same from step to step, and so do the views. When DDP lays its
        buckets out anew it allocates new buffers, at new addresses: the views made here keep
        the old ones alive until then.
        """
        key = tuple(buffer.data_ptr() for buffer, _ in exchanged)
        if key != self._views[0]:
            pieces: list[Any] = [None] * len(self._params)
            for buffer, bucket in exchanged:
                params = bucket.parameters()
                views = buffer.view(-1).split([p.numel() for p in params])
                for p, view in zip(params, views, strict=True):
                    pieces[self._index[id(p)]] = view
            if any(piece is None for piece in pieces):
                return None
            self._views = (key, pieces)
        return self._views[1]

    # --- where the host may wait -------------------------------------------------------------

    def read(self, *, epoch: int) -> None:
        """Stop the run (every rank alike) if a step since the last read had non-finite
        gradients and ``monitor.nonfinite`` is ``error``; one read of the device."""
        if self.nonfinite != "error":
            return
        step, param, loss = torch.stack(
            [self._bad_step.double(), self._bad_param.double(), self._bad_loss]
        ).tolist()
        if step < 0:
            return
        self._clear_first()
        name = self._names[int(param)] if param < len(self._names) else None
        raise NonFiniteGradientError(self._message(name, loss, step=int(step), epoch=epoch))

    def columns(self) -> dict[str, float]:
        """This epoch's gradient columns of history.csv (one read of the device)."""
        total, largest, norms = torch.stack(
            [self._norm_sum, self._norm_max, self._norms.double()]
        ).tolist()
        return {
            "grad_norm_mean": total / norms if norms else math.nan,
            "grad_norm_max": largest if norms else math.nan,
            "skipped_steps": self._steps - int(norms),
        }

    def _message(self, name: str | None, loss: float, *, step: int, epoch: int) -> str:
        local = (name, loss)
        reports = distributed.all_gather_object(local) if self.world_size > 1 else [local]
        culprits = [(r, n, x) for r, (n, x) in enumerate(reports) if n is not None]
        if not culprits:
            where = "the ranks' own gradients were finite; their sum was not"
        else:
            rank, name, x = culprits[0]
            who = f"rank {rank}" if self.world_size > 1 else "the step"
            why = f"its training loss is {x}" if not math.isfinite(x) else "its loss is finite"
            where = f"{who} produced them ({why}), first in parameter {name}"
        return (
            f"non-finite gradients at step {step + 1} (epoch {epoch}): {where}; lower "
            "training.optimizer.kwargs.lr, check the data for NaN features, or set "
            "monitor.nonfinite: skip"
        )
