"""Inside a run: where each rank's time goes, and the checks on its gradients and replicas.

The loop calls a :class:`Monitor` at a few fixed points. ``lap(part)`` charges the time since
the previous call to ``part``, so the parts tile the epoch and account for all of it; waits
at collectives and evaluation are timed with ``phase``. The gradient exchange is timed by
wrapping DDP's communication hook: each bucket's launch, return and completion. The exposed
part of the exchange is the time the backward pass spent inside the hook (a hook that
exchanges synchronously, like the shared-memory one, hides nothing) plus the wait after the
last bucket was handed over; the rest of the exchange ran while gradients were still being
computed. On a CPU the clock is ``time.perf_counter``; on a GPU each mark is a CUDA event on
the current stream, read after one synchronisation at the end of the epoch, so the parts
measure the GPU's timeline (the data part is the time the GPU waited for its next batch).

Once per epoch every rank's numbers go to rank 0 with the epoch's other records (the trainer's
one gather at the epoch's end); rank 0 writes them to ``ranks.csv`` and names stragglers.
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..config import MonitorConfig
from ..errors import QGError
from ..parallel import distributed
from .timing import (
    PARTS,
    TRAINING_PARTS,
    CpuClock,
    CudaClock,
    peak_memory_mb,
    reset_peak_memory,
    union_length,
)


class TrainingDivergedError(QGError):
    """The training loss or the gradients became NaN or infinite."""


class NonFiniteGradientError(TrainingDivergedError):
    """A step's gradients were NaN or infinite (``monitor.nonfinite: error``)."""


class ReplicaMismatchError(QGError):
    """The ranks' copies of the model are no longer the same."""


class Monitor:
    """One rank's timing and checks; the trainer calls it at a few fixed points.

    ``Monitor(config.monitor, device, rank, world_size, model)``, then per epoch:
    ``start_epoch()``, ``lap(part)`` after each part of each step, ``phase(part)`` around
    evaluation and waits, ``gradients_ok(step)`` before each optimizer step,
    ``check_replicas(step)`` after it, and ``end_epoch(epoch)``, which returns the
    history columns and this rank's row of ranks.csv.
    """

    def __init__(
        self,
        config: MonitorConfig,
        device: torch.device,
        rank: int,
        world_size: int,
        model: nn.Module,
        *,
        replicated: bool = True,
        profiling: bool = False,
    ):
        self.config = config
        # every rank holds the whole weights (not so under fsdp): check_replicas compares them
        self.replicated = replicated
        self.device = device
        self.rank, self.world_size = rank, world_size
        self.model = model
        self._params = [p for p in model.parameters() if p.requires_grad]
        # Under DDP on a CPU the averaged gradients of a step lie in DDP's bucket buffers, in an
        # order DDP chooses (and changes after the first step, and again in a resumed run); a
        # step's norm is taken over one copy of them in the model's order, so that it has the
        # same bits whatever the layout, in two operations rather than one per parameter.
        self._flat: torch.Tensor | None = None
        if world_size > 1 and {(p.device.type, p.dtype) for p in self._params} == {
            ("cpu", torch.float32)
        }:
            self._flat = torch.empty(sum(p.numel() for p in self._params))
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._views: tuple[tuple | None, list[torch.Tensor]] = (None, [])  # the buffers' params
        self.clock = CudaClock(device) if device.type == "cuda" else CpuClock()
        self.current = "data"
        self.profiling = profiling  # qg profile: label the exchange in the trace
        self._start_epoch_state()

    def _start_epoch_state(self) -> None:
        self._laps: list[tuple[str, Any]] = []  # (part, the mark that ended it)
        self._steps: list[tuple[list, int]] = []  # a step's buckets, and its backward lap
        self._buckets: list[list] = []  # this step's: [launch, return, done, bytes]
        self._flags: list[tuple[list, torch.Tensor, torch.Tensor]] = []  # before the exchange
        self._exchanged: list[tuple[torch.Tensor, Any]] = []  # (a bucket's buffer, the bucket)
        self._norm_sum, self._norm_max, self._norms, self.skipped = 0.0, 0.0, 0, 0
        self._bytes, self._exchanges = 0, 0
        self.graphs = 0  # trained on by this rank (the loop counts them)

    # --- timing ------------------------------------------------------------------------------

    def start_epoch(self) -> None:
        self._start_epoch_state()
        self.current = "data"
        if self.config.timing:
            reset_peak_memory(self.device)
            self._laps.append(("start", self.clock.mark()))

    def lap(self, part: str) -> None:
        """Charge the time since the previous mark to ``part``."""
        if not self.config.timing:
            return
        self._laps.append((part, self.clock.mark()))
        if part == "backward" and self._buckets:
            self._steps.append((self._buckets, len(self._laps) - 1))
            self._bytes += sum(b[3] for b in self._buckets)
            self._exchanges += 1
            self._buckets = []

    @contextlib.contextmanager
    def phase(self, part: str) -> Iterator[None]:
        """Time spent inside goes to ``part``; what ran before it to the enclosing part."""
        outer = self.current
        self.lap(outer)
        self.current = part
        try:
            yield
        finally:
            self.lap(part)
            self.current = outer

    def wrap_hook(self, hook: Callable) -> Callable:
        """DDP's communication hook ``hook(state, bucket) -> future``, timed and checked.

        Before the exchange, the bucket's own gradients are checked for NaN and infinities, so
        that the rank that produced them can be named if the averaged gradients turn out
        non-finite. With ``monitor.timing``, the bucket's launch, return and completion are
        marked.
        """

        # not annotated: DDP checks a hook's annotations, and these would be strings here
        def monitored(state, bucket):
            buffer = bucket.buffer()
            on_cpu = buffer.device.type == "cpu"
            # On a CPU a sum says cheaply whether the bucket is finite, and only a bucket that
            # is not is searched. On a GPU the flags stay on the device (no synchronisation);
            # they are read only if the averaged gradients turn out non-finite.
            if not on_cpu or not math.isfinite(buffer.sum().item()):
                finite = torch.isfinite(buffer)
                # argmin of the flags: the first non-finite element (0 when there is none)
                first = finite.view(torch.uint8).argmin()
                self._flags.append((bucket.parameters(), finite.all(), first))
            if not self.config.timing:
                future = hook(state, bucket)
            else:
                start = self.clock.mark()
                if self.profiling:
                    with torch.profiler.record_function("qg.gradient_exchange"):
                        future = hook(state, bucket)
                else:
                    future = hook(state, bucket)
                returned = self.clock.mark()
                record = [start, returned, None, buffer.numel() * buffer.element_size()]
                self._buckets.append(record)
                if on_cpu and future.done():  # the exchange ran inside the hook
                    record[2] = returned
                else:

                    def done(_: torch.futures.Future) -> None:  # a failure is DDP's to report
                        record[2] = self.clock.mark()

                    future.add_done_callback(done)  # run by the time the epoch is read
            if self._flat is not None:  # the exchange leaves the average in the buffer
                self._exchanged.append((buffer, bucket))
            return future

        return monitored

    @contextlib.contextmanager
    def exchange(self, nbytes: int, *, in_backward: bool) -> Iterator[None]:
        """Around an exchange of ``nbytes`` that no DDP hook sees: inside the backward pass
        (fsdp's reduce-scatter of a unit: timed as a bucket is), or after it (the invariant
        strategy's exact sum: all of it exposed, between the backward pass and the step)."""
        if not self.config.timing:
            yield
            return
        label = (
            torch.profiler.record_function("qg.gradient_exchange")
            if self.profiling
            else contextlib.nullcontext()
        )
        if in_backward:
            start = self.clock.mark()
            with label:
                yield
            end = self.clock.mark()
            self._buckets.append([start, end, end, nbytes])
            return
        with self.phase("exchange_exposed"), label:
            yield
        self._bytes += nbytes
        self._exchanges += 1

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

    def end_epoch(self, *, epoch: int) -> tuple[dict[str, float], dict[str, Any] | None]:
        """(this epoch's history columns, this rank's row of ranks.csv; None without
        ``monitor.timing``). The trainer gathers the rows with the other records of the epoch's
        end, in the one collective it makes there anyway."""
        history = {
            "grad_norm_mean": self._norm_sum / self._norms if self._norms else math.nan,
            "grad_norm_max": self._norm_max if self._norms else math.nan,
            "skipped_steps": self.skipped,
        }
        if not self.config.timing:
            return history, None
        self.lap(self.current)
        steps = [(bs, i) for bs, i in self._steps if all(b[2] is not None for b in bs)]
        bucket_marks = [m for bs, _ in steps for b in bs for m in b[:3]]
        resolved = self.clock.seconds([m for _, m in self._laps] + bucket_marks)
        at, exchange_at = resolved[: len(self._laps)], iter(resolved[len(self._laps) :])
        parts = dict.fromkeys(PARTS, 0.0)
        for i, (part, _) in enumerate(self._laps[1:], start=1):
            parts[part] += at[i] - at[i - 1]
        # exchanged after the backward pass (the invariant strategy's): all of it exposed
        exchange = after = parts["exchange_exposed"]
        exposed = 0.0
        for buckets, end in steps:
            marks = [(next(exchange_at), next(exchange_at), next(exchange_at)) for _ in buckets]
            handed = max(m[1] for m in marks)  # the last bucket: the gradients are done
            inside = sum(m[1] - m[0] for m in marks)  # the backward pass stood still
            whole = max(union_length([(m[0], m[2]) for m in marks]), inside)
            exchange += whole
            exposed += min(inside + max(0.0, at[end] - handed), whole)
        within = min(exposed, parts["backward"])
        parts["backward"] -= within
        parts["exchange_exposed"] = after + within
        training = sum(parts[p] for p in TRAINING_PARTS)
        row = {
            "epoch": epoch,
            "rank": self.rank,
            "epoch_s": at[-1] - at[0],
            **{f"{p}_s": parts[p] for p in PARTS[:3]},
            "exchange_s": exchange,
            **{f"{p}_s": parts[p] for p in PARTS[3:]},
            "graphs_per_s": self.graphs / training if training > 0 else math.nan,
            "peak_memory_mb": peak_memory_mb(self.device),
            "bytes_exchanged": self._bytes // self._exchanges if self._exchanges else 0,
        }
        return history, row

    # --- gradients ---------------------------------------------------------------------------

    def gradients_ok(self, sums: torch.Tensor, step: int, epoch: int, scaled: bool) -> bool:
        """Whether the optimizer may take this step; records the global gradient norm.

        Called on every rank after the backward pass (and the exchange: the gradients are the
        averaged ones, the same on every rank, so every rank reaches the same answer without
        a collective). ``scaled``: a float16 gradient scaler is on, and skips overflowing steps
        itself; they are counted, not errors. Otherwise non-finite gradients end the run
        (``monitor.nonfinite: error``), naming the rank, the parameter and whether the step's
        loss was finite (this rank's ``sums`` of the step, read only then), or skip the step.
        """
        exchanged, self._exchanged = self._exchanged, []
        views = None if self._flat is None or scaled else self._in_model_order(exchanged)
        if views is not None:
            norm = float(torch.linalg.vector_norm(torch.cat(views, out=self._flat)))
        else:
            # Per parameter, in the model's order, then over them: the same bits whatever the
            # layout of the gradients in memory, and on a CPU 4x quicker than get_total_norm's
            # grouping by device and dtype.
            norms = [torch.linalg.vector_norm(p.grad) for p in self._params if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        flags, self._flags = self._flags, []
        if math.isfinite(norm):
            self._norm_sum += norm
            self._norm_max = max(self._norm_max, norm)
            self._norms += 1
            return True
        self.skipped += 1
        if scaled:
            return True  # the scaler sees the same gradients and skips the step itself
        if self.config.nonfinite == "skip":
            return False
        raise NonFiniteGradientError(
            self._nonfinite_message(flags, sums[:, 0].sum(), step=step, epoch=epoch)
        )

    def _first_nonfinite(self, flags: list) -> str | None:
        """The first of this rank's parameters whose own gradient was not finite."""
        names = {id(p): name for name, p in self.model.named_parameters()}
        order = {name: i for i, name in enumerate(names.values())}
        if self.world_size == 1:  # no exchange: the gradients are still this rank's own
            return next(
                (
                    name
                    for name, p in self.model.named_parameters()
                    if p.grad is not None and not bool(torch.isfinite(p.grad).all())
                ),
                None,
            )
        found = []
        for params, finite, first in flags:
            if bool(finite):
                continue
            offsets = [0]
            for p in params:
                offsets.append(offsets[-1] + p.numel())
            index = bisect.bisect_right(offsets, int(first)) - 1
            found.append(names.get(id(params[index]), "?"))
        return min(found, key=lambda n: order.get(n, len(order)), default=None)

    def _nonfinite_message(self, flags: list, loss: torch.Tensor, *, step: int, epoch: int) -> str:
        local = (self._first_nonfinite(flags), float(loss))
        reports = distributed.all_gather_object(local) if self.world_size > 1 else [local]
        culprits = [(r, name, x) for r, (name, x) in enumerate(reports) if name is not None]
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

    # --- replicas ----------------------------------------------------------------------------

    def check_replicas(self, *, step: int | None) -> None:
        """Compare every rank's weights (a checksum each), every ``check_replicas_every``
        steps, or now with ``step=None``; a difference ends the run on every rank.

        Buffers are not compared: DDP overwrites them with rank 0's at every forward pass, and
        normalisation statistics legitimately differ between ranks until then.
        """
        every = self.config.check_replicas_every
        if self.world_size == 1 or not self.replicated or not every:
            return
        if step is not None and step % every:
            return
        names = [name for name, _ in self.model.named_parameters()]
        with self.phase("wait"):
            every_rank = distributed.all_gather(_checksums(self.model)).tolist()
        for i, name in enumerate(names):
            values = [theirs[i] for theirs in every_rank]
            if len(set(values)) == 1:
                continue
            # the odd one out: the rank whose copy differs from most (ties: from rank 0's)
            common = max(values, key=lambda v: (values.count(v), v == values[0]))
            rank = next(r for r, v in enumerate(values) if v != common)
            when = "at the end of training" if step is None else f"after step {step}"
            raise ReplicaMismatchError(
                f"the ranks' models differ {when}: rank {rank}'s parameter {name} is not the "
                f"other ranks'; something changed the weights outside the optimizer on one "
                f"rank (checked every {every} steps: monitor.check_replicas_every)"
            )


def check_loss(columns: dict[str, float], *, epoch: int) -> dict[str, float]:
    """The training columns of an epoch, if its loss is finite."""
    if not math.isfinite(columns["train_loss"]):
        raise TrainingDivergedError(
            f"the training loss is {columns['train_loss']} after epoch {epoch}; lower "
            "training.optimizer.kwargs.lr or check the data for NaN features"
        )
    return columns


def _checksums(model: nn.Module) -> torch.Tensor:
    """A checksum of each parameter's bits, sensitive to the position of every element."""
    out = []
    for p in model.parameters():
        t = p.detach().contiguous().reshape(-1)
        if t.is_floating_point():
            t = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
        weights = torch.arange(t.numel(), device=t.device) % 1021 + 1
        out.append(t.long().mul(weights).sum())
    return torch.stack(out) if out else torch.zeros(0, dtype=torch.long)
