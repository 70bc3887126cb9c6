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

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ...config import MonitorConfig
from ...errors import QGError
from ...parallel import distributed
from .gradients import GradientChecks, NonFiniteGradientError, TrainingDivergedError
from .timing import (
    PARTS,
    TRAINING_PARTS,
    CpuClock,
    CudaClock,
    peak_memory_mb,
    reset_peak_memory,
    union_length,
)

__all__ = ["Monitor", "NonFiniteGradientError", "ReplicaMismatchError", "TrainingDivergedError"]


class ReplicaMismatchError(QGError):
    """The ranks' copies of the model are no longer the same."""


# One training step in this many has its parts timed (the first of the epoch, and every
# TIMED_EVERY-th after it); the others cost no mark.
TIMED_EVERY = 8


class Monitor:
    """One rank's timing and checks; the trainer calls it at a few fixed points.

    ``Monitor(config.monitor, device, rank, world_size, model)``, then per epoch:
    ``start_epoch()``, ``lap(part)`` after each part of each step timed (one in
    :data:`TIMED_EVERY`, ``step_timed`` says whether the step now running is; ``lap("untimed")``
    after the steps between), ``phase(part)`` around
    evaluation and waits, ``gradients_ok(step)`` before each optimizer step,
    ``check_replicas(step)`` and ``read(step)`` after it, ``read(step=None)`` at the end of
    the training pass, and ``end_epoch(epoch)``, which returns the history columns and this
    rank's row of ranks.csv. Nothing is read on the host during a step: the checks stay on the
    device until ``read`` (see :mod:`.gradients`).
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
        masks: bool = False,
    ):
        self.config = config
        # every rank holds the whole weights (not so under fsdp): check_replicas compares them
        self.replicated = replicated
        self.device = device
        self.rank, self.world_size = rank, world_size
        self.model = model
        # masks: the optimizer leaves out a step on a flag that stays on the device
        self.gradients = GradientChecks(
            model, device, world_size, nonfinite=config.nonfinite, masks=masks
        )
        self._replica_step = torch.full((), -1, dtype=torch.int64, device=device)
        self._replica_sums: torch.Tensor | None = None  # every rank's, when they first differed
        self.clock = CudaClock(device) if device.type == "cuda" else CpuClock()
        # One step in TIMED_EVERY has its parts timed (on a GPU each mark is an event in the
        # stream); the others' time is shared out over the parts as the timed steps spent it.
        # (qg profile: every step, whose exchanges its trace labels)
        self.timed_every = (1 if profiling else TIMED_EVERY) if config.timing else 0
        self.step_timed: bool | None = None  # in the training pass: whether this step is
        self.current = "data"
        self.profiling = profiling  # qg profile: label the exchange in the trace
        self._start_epoch_state()

    def _start_epoch_state(self) -> None:
        self._laps: list[tuple[str, Any]] = []  # (part, the mark that ended it)
        self._steps: list[tuple[list, int]] = []  # a step's buckets, and its backward lap
        self._buckets: list[list] = []  # this step's: [launch, return, done, bytes]
        self.gradients.start_epoch()
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
        if part == "data" and self.step_timed is False:  # a wait inside a step not timed
            part = "untimed"
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

        Before the exchange, the bucket's own gradients are checked for NaN and infinities (on
        the device), so that the rank that produced them can be named if the averaged gradients
        turn out non-finite. With ``monitor.timing``, the bucket's launch, return and completion are
        marked.
        """

        # not annotated: DDP checks a hook's annotations, and these would be strings here
        def monitored(state, bucket):
            buffer = bucket.buffer()
            on_cpu = buffer.device.type == "cpu"
            # This rank's own gradients, checked before the exchange averages them (on the
            # device), so that the rank that produced non-finite ones can be named.
            self.gradients.bucket(buffer, bucket)
            if not self.config.timing or self.step_timed is False:
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
            return future

        return monitored

    @contextlib.contextmanager
    def exchange(self, nbytes: int, *, in_backward: bool) -> Iterator[None]:
        """Around an exchange of ``nbytes`` that no DDP hook sees: inside the backward pass
        (fsdp's reduce-scatter of a unit: timed as a bucket is), or after it (the invariant
        strategy's exact sum: all of it exposed, between the backward pass and the step)."""
        if not self.config.timing or self.step_timed is False:
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

    def end_epoch(self, *, epoch: int) -> tuple[dict[str, float], dict[str, Any] | None]:
        """(this epoch's history columns, this rank's row of ranks.csv; None without
        ``monitor.timing``). The trainer gathers the rows with the other records of the epoch's
        end, in the one collective it makes there anyway."""
        history = self.gradients.columns()
        if not self.config.timing:
            return history, None
        self.lap(self.current)
        steps = [(bs, i) for bs, i in self._steps if all(b[2] is not None for b in bs)]
        bucket_marks = [m for bs, _ in steps for b in bs for m in b[:3]]
        resolved = self.clock.seconds([m for _, m in self._laps] + bucket_marks)
        at, exchange_at = resolved[: len(self._laps)], iter(resolved[len(self._laps) :])
        parts = dict.fromkeys((*PARTS, "untimed"), 0.0)
        for i, (part, _) in enumerate(self._laps[1:], start=1):
            parts[part] += at[i] - at[i - 1]
        untimed = parts.pop("untimed")
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
        timed = sum(parts[p] for p in TRAINING_PARTS)
        if untimed and timed > 0:  # the steps not timed, shared out as the timed ones spent
            scale = 1 + untimed / timed
            for p in TRAINING_PARTS:
                parts[p] *= scale
            exchange *= scale
        elif untimed:
            parts["data"] += untimed
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

    def gradients_ok(self, loss: torch.Tensor, step: int, epoch: int, scaled: bool):
        """Whether the optimizer may take this step (see :meth:`.GradientChecks.check`): True,
        a flag on the device for an optimizer that masks its update with it, or a bool.
        ``loss``: the step's training loss on this rank (a scalar, named if it goes wrong)."""
        return self.gradients.check(loss, step, scaled)

    @property
    def takes_every_step(self) -> bool:
        """Whether every step is taken (``monitor.nonfinite: error``: the run stops instead)."""
        return self.gradients.nonfinite == "error"

    def read(self, *, step: int | None, epoch: int) -> None:
        """Read the checks kept on the device, every ``monitor.read_every`` steps (the same
        steps on every rank), or now with ``step=None``: non-finite gradients or replicas that
        differ stop the run on every rank, naming the step they were first seen at."""
        every = self.config.read_every
        if step is not None and (not every or step % every):
            return
        self.gradients.read(epoch=epoch)
        self._read_replicas()

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
        with self.phase("wait"):
            every_rank = distributed.all_gather(_checksums(self.model))
        # compared on the device; read with the other checks (at once at the end of training)
        first = (every_rank != every_rank[:1]).any() & (self._replica_step < 0)
        when = -2 if step is None else step  # -2: at the end of training
        self._replica_step = torch.where(first, when, self._replica_step)
        if self._replica_sums is None:
            self._replica_sums = every_rank.clone()
        else:
            self._replica_sums = torch.where(first, every_rank, self._replica_sums)
        if step is None:
            self._read_replicas()

    def _read_replicas(self) -> None:
        if self._replica_sums is None or int(self._replica_step) == -1:
            return
        step = int(self._replica_step)
        every_rank = self._replica_sums.tolist()
        every = self.config.check_replicas_every
        names = [name for name, _ in self.model.named_parameters()]
        for i, name in enumerate(names):
            values = [theirs[i] for theirs in every_rank]
            if len(set(values)) == 1:
                continue
            # the odd one out: the rank whose copy differs from most (ties: from rank 0's)
            common = max(values, key=lambda v: (values.count(v), v == values[0]))
            rank = next(r for r, v in enumerate(values) if v != common)
            when = "at the end of training" if step == -2 else f"after step {step}"
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
