"""The checks on each step's gradients, kept on the device until they are read.

Every optimizer step the global gradient norm is taken, recorded for history.csv (its mean
and maximum over the steps that were taken) and compared with infinity. None of that is read
on the host during a step: on a GPU a read waits for every kernel queued before it, so the
host could never run ahead and queue the next step while the GPU works. Each step writes one
row of a window kept on the device (each parameter's norm, the global norm, this rank's loss
and its first non-finite parameter where DDP's buckets tell it), in one operation; the window
is summed up and read every ``monitor.read_every`` steps and at the end of each training pass,
the same step on every rank: the norm's sums, the count of skipped steps and the first
non-finite step, its parameter and its loss.

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

from ...compat import torch as compat_torch
from ...errors import QGError
from ...parallel import distributed

NONE = 2**62  # no parameter: larger than any parameter's index (exact in float64)
WINDOW_ROWS = 256  # steps the window holds before it grows (monitor.read_every is 200)


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
    if not compat_torch.scales_inside_step(optimizer):
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
        # Per step since the last read, a row: each parameter's norm (zero without a
        # gradient), the global norm, this rank's loss, this rank's first non-finite parameter
        # from DDP's buckets (NONE: none, or not known). Each row's step, and whether its
        # parameters' norms were taken (not under DDP on a CPU), are kept on the host.
        width = len(self._params) + 3
        self._window = torch.zeros(WINDOW_ROWS, width, dtype=torch.float64, device=device)
        self._rows: list[tuple[int, bool]] = []  # (step, parameter norms taken)
        self._none = torch.full((), NONE, dtype=torch.float64, device=device)
        self._scaled = False  # a float16 scaler skips non-finite steps itself: not errors
        self._first: tuple[int, str | None, float] | None = None  # (step, parameter, loss)
        self.start_epoch()

    def start_epoch(self) -> None:
        self._norm_sum, self._norm_max, self._norms = 0.0, 0.0, 0
        self._steps = 0  # checked this epoch: those not counted in _norms were skipped

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

    def check(self, loss: torch.Tensor, step: int, scaled: bool) -> bool | torch.Tensor:
        """Record this step's gradient norm; returns whether the optimizer may step: True
        (``nonfinite: error``, whose run stops at the next read), or the flag on the device
        (for an optimizer that masks its update with it), or the flag read on the host
        (``nonfinite: skip`` with an optimizer that cannot mask).

        Called on every rank after the exchange: the gradients are the averaged ones, the same
        on every rank, so every rank reaches the same answer without a collective. ``scaled``:
        a float16 gradient scaler is on, and skips overflowing steps itself (counted, not
        errors). ``loss``: this rank's training loss of the step, named if it goes wrong.
        """
        exchanged, self._exchanged = self._exchanged, []
        flags, self._flags = self._flags, []
        views = None if self._flat is None or scaled else self._in_model_order(exchanged)
        if views is not None:
            norms, norm = None, torch.linalg.vector_norm(torch.cat(views, out=self._flat))
        else:
            norms, norm = self.norms()
        culprit = self._none
        if self.world_size > 1 and self.nonfinite == "error":
            culprit = self._first_in_buckets(flags)
            culprit = self._none if culprit is None else culprit
        self.last_norm = norm
        self._scaled = scaled
        self._record(step, norms, norm, loss, culprit)
        if scaled:
            return True  # the scaler sees the same gradients and skips the step itself
        if self.nonfinite == "error":
            # the run stops at the next read, before any weights are saved: a step left out
            # would cost a masked update every step (a flag, its copy, the counters' undo)
            return True
        finite = norm < math.inf  # a norm is >= 0 or NaN: one operation where isfinite takes 4
        if self.masks:
            return finite
        return bool(finite)  # the one read a step of an optimizer that cannot mask

    def norms(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Each parameter's gradient norm, in the model's order (zero without a gradient; None
        for no parameter), and their global norm."""
        norms = None
        # Per parameter, in the model's order, then over them: the same bits whatever the
        # layout of the gradients in memory, and on a CPU 4x quicker than get_total_norm's
        # grouping by device and dtype. One call for all of them (on a GPU one kernel
        # launch, where a norm each would launch one per parameter).
        # (a list, not a generator: resumed once per parameter, a call each, every step)
        which = tuple([i for i, p in enumerate(self._params) if p.grad is not None])
        if which:
            grads = [self._params[i].grad for i in which]
            if hasattr(grads[0], "full_tensor"):  # fsdp's shards: each norm over all ranks
                norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
                norms = norms.full_tensor()
            else:
                norms = torch.stack(compat_torch.norms(grads))
            norm = torch.linalg.vector_norm(norms)
            if len(which) < len(self._params):  # zero for those without a gradient
                norms = torch.zeros_like(self._window[0, :-3]).index_copy_(
                    0, self._positions(which, norms.device), norms.double()
                )
        else:
            norm = torch.zeros((), device=self.device)
        return norms, norm

    def record(self, step: int, row: torch.Tensor) -> None:
        """Step ``step``'s row of the window, made elsewhere (a captured step's: each
        parameter's norm, the global norm, the loss, no culprit)."""
        self._grow()
        self._window[len(self._rows)].copy_(row)
        self._rows.append((step, True))
        self.last_norm = row[-3]

    def _grow(self) -> None:
        if len(self._rows) == len(self._window):  # read_every 0, or more steps than rows
            self._window = torch.cat([self._window, torch.zeros_like(self._window)])

    def _record(self, step: int, norms, norm, loss, culprit) -> None:
        """The step's row of the window, written in one operation."""
        self._grow()
        row = self._window[len(self._rows)]
        tail = [norm.reshape(1), loss.reshape(1), culprit.reshape(1)]
        if norms is None:
            torch.cat(tail, out=row[-3:])
        else:
            torch.cat([norms, *tail], out=row)
        self._rows.append((step, norms is not None))

    def _positions(self, which: tuple[int, ...], device: torch.device) -> torch.Tensor:
        order = self._order_of.get(which)
        if order is None:
            order = self._order_of[which] = torch.tensor(which, device=device)
        return order

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

    def _fold(self) -> None:
        """Add the window's steps to the epoch's sums, note the first non-finite one, and
        empty it (one read of the device; a second only when a step went wrong)."""
        n = len(self._rows)
        if not n:
            return
        window, rows = self._window[:n], self._rows
        self._rows = []
        norm = window[:, -3]
        finite = norm < math.inf
        counted = torch.where(finite, norm, 0.0)
        first = torch.where(finite, n, torch.arange(n, device=norm.device)).min()
        total, largest, norms, bad = torch.stack(
            [counted.sum(), counted.max(), finite.sum().double(), first.double()]
        ).tolist()
        self._norm_sum += total
        self._norm_max = max(self._norm_max, largest)
        self._norms += int(norms)
        self._steps += n
        bad = int(bad)
        if bad == n or self._scaled or self.nonfinite != "error" or self._first is not None:
            return
        step, has_norms = rows[bad]
        values = window[bad].tolist()
        culprit = int(values[-1])
        if has_norms and self.world_size == 1:  # this rank's own: its gradients' norms
            culprit = next((i for i, x in enumerate(values[:-3]) if not x < math.inf), NONE)
        name = self._names[culprit] if culprit < len(self._names) else None
        self._first = (step, name, values[-2])

    def read(self, *, epoch: int) -> None:
        """Stop the run (every rank alike) if a step since the last read had non-finite
        gradients and ``monitor.nonfinite`` is ``error``; one read of the device."""
        self._fold()
        if self._first is None:
            return
        (step, name, loss), self._first = self._first, None
        raise NonFiniteGradientError(self._message(name, loss, step=step, epoch=epoch))

    def columns(self) -> dict[str, float]:
        """This epoch's gradient columns of history.csv."""
        self._fold()
        norms = self._norms
        return {
            "grad_norm_mean": self._norm_sum / norms if norms else math.nan,
            "grad_norm_max": self._norm_max if norms else math.nan,
            "skipped_steps": self._steps - norms,
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
