"""The whole training step replayed as one CUDA graph: ``training.compile`` with padded batches
(``training.pad_batches``) on a GPU.

Padded batches have one shape, so every step launches the same kernels: the forward pass, the
loss, the backward pass, the gradient norms, the optimizer's update and the epoch's sums.
:class:`CapturedStep` records them once as a CUDA graph (``torch.cuda.graph``), after
:data:`WARMUP` eager steps, and replays the graph each step: the host copies the padded batch
and its targets into the graph's inputs and launches one replay, where an eager step launches
some 300 kernels. On a CPU the same step runs uncaptured, call by call.

What stays outside the graph, each step: padding the batch and reading its targets (the real
rows differ from batch to batch), and the monitor's row of the gradient window (its place is
the step's). The learning rate is a tensor on the GPU that a schedule fills; checkpoints hold
it as a number, as any run reads it. Each task's loss is a mean over the real rows:
cross-entropy ignores the padding rows itself, and gives the bits of an uncaptured step; any
other loss is taken for every row and the padding rows masked out, which differs from an
uncaptured step's mean by rounding.

The step is not captured, and the log says why, with several processes, accumulated or
micro-batches, float16 (its gradient scaler decides on the host), ``monitor.nonfinite: skip``,
a moving average of the weights, a schedule stepped every step, an optimizer without a
``capturable`` option, or a task whose loss is not a torch loss class with
``reduction="mean"`` and no ``loss_kwargs`` (edge-level tasks, a model's own loss terms, a
criterion function).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from torch import Tensor, nn

from ...config import TrainingConfig
from ...data.batches.padding import Budgets, pad_batch
from ..monitoring.gradients import NONE, GradientChecks
from ..tasks.task import Task, select_outputs, total_loss
from .optim import clip_gradients

log = logging.getLogger(__name__)

WARMUP = 3  # eager steps before the capture (lazy initialisations happen in them)
CAPTURE = True  # False: the same step uncaptured on a GPU too (what a test compares with)
# What the padding rows' targets are set to: a class index no output is (and that torch's
# cross-entropy ignores), a value no binary output rounds to; finite, as the masked losses need.
PAD_TARGET = -100


def refusal(
    training: TrainingConfig,
    *,
    world_size: int,
    micro_batches: int,
    scaled: bool,
    nonfinite: str,
    averaged: bool,
    per_step: bool,
    momentum: bool,
    optimizer: torch.optim.Optimizer,
    tasks: list[Task],
) -> str | None:
    """Why a step with these settings cannot be replayed as one graph, or None."""
    if world_size > 1:
        return f"{world_size} processes (the gradient exchange is not captured)"
    if training.accumulate_grad_batches > 1 or micro_batches > 1:
        return "several backward passes a step (training.accumulate_grad_batches, micro-batches)"
    if scaled:
        return "training.precision: fp16 (its gradient scaler decides on the host)"
    if nonfinite != "error":
        return f"monitor.nonfinite: {nonfinite} (a skipped step is decided on the host)"
    if averaged:
        return "training.ema_decay (the moving average is not captured)"
    if per_step:
        return "training.lr_scheduler.interval: step (the learning rate changes every step)"
    if momentum:
        return "a schedule that cycles the momentum (the update holds it as a number)"
    if "capturable" not in optimizer.defaults:
        return f"{type(optimizer).__name__} has no capturable option"
    for task in tasks:
        if row_loss(task) is None:
            return (
                f"task {task.name!r}: its loss is not a torch loss class with reduction='mean' "
                "and no loss_kwargs"
            )
    return None


def row_loss(task: Task) -> nn.Module | None:
    """``task``'s loss as the captured step takes it over the padded rows, or None where it
    cannot: a loss that ignores the padding's target itself (cross-entropy's
    ``ignore_index``), as it is; any other, each row's (``reduction="none"``), to be masked."""
    fn = task.loss_fn
    if task.loss_takes_batch:  # the criterion: a loss class takes y, a function the batch
        fn = getattr(fn, "loss", None) if task.config.target_name == "y" else None
    if task.level == "edge" or not task.kind.needs_target:
        return None
    if not isinstance(fn, nn.Module) or getattr(fn, "reduction", None) != "mean":
        return None
    if getattr(fn, "weight", None) is not None:  # a weighted mean is not a mean of the rows
        return None
    if getattr(fn, "ignore_index", None) == PAD_TARGET:  # torch's mean over the real rows
        return fn
    rows = copy.copy(fn)
    rows.reduction = "none"
    return rows


class CapturedStep:
    """Training steps on padded batches, replayed as one CUDA graph on a GPU (``capture``),
    run as they are elsewhere. ``sums``: the epoch's per-task sums the steps add to (loss over
    rows, rows right, rows), zeroed by :meth:`start_epoch`."""

    def __init__(
        self,
        *,
        module: nn.Module,
        model: nn.Module,
        tasks: list[Task],
        optimizer: torch.optim.Optimizer,
        gradients: GradientChecks,
        budgets: Budgets,
        features: tuple[str, ...],
        device: torch.device,
        autocast_dtype: torch.dtype | None,
        clip: Any,
        model_name: str | None,
    ):
        self.module, self.model, self.tasks = module, model, tasks
        self.optimizer, self.gradients = optimizer, gradients
        self.budgets, self.features, self.device = budgets, features, device
        self.autocast_dtype, self.clip, self.model_name = autocast_dtype, clip, model_name
        self.capture = device.type == "cuda" and CAPTURE
        self.losses = [row_loss(task) for task in tasks]
        self.sums = torch.zeros(1, len(tasks), 3, dtype=torch.float64, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0
        self.inputs: Any = None  # the padded batch the graph reads
        self.targets: list[Tensor] = []
        self.counts = torch.zeros(len(tasks), dtype=torch.float64, device=device)
        self.row: Tensor | None = None  # the step's row of the gradient window
        self.none = torch.full((1,), float(NONE), dtype=torch.float64, device=device)
        # the warm-up steps' and the capture's own streams, on the run's GPU (the current
        # device may be another)
        self.side = torch.cuda.Stream(device) if self.capture else None
        self.capturing = torch.cuda.Stream(device) if self.capture else None

    def _adopt(self) -> None:
        """The optimizer made capturable: its update reads its step count and learning rate on
        the device, so a replay takes the schedule's rate (which fills the tensor) and counts
        its steps. Again after a checkpoint was loaded into it, whose state is new: the graph
        is captured anew."""
        for group in self.optimizer.param_groups:
            group["capturable"] = True
            group["lr"] = torch.tensor(float(group["lr"]), device=self.device)
        for state in self.optimizer.state.values():
            if isinstance(state.get("step"), Tensor):
                state["step"] = state["step"].to(self.device)
        self.graph, self.steps = None, 0

    def start_epoch(self) -> None:
        self.sums.zero_()

    def __call__(self, batch: Any, step: int) -> None:
        """Train on ``batch`` (optimizer step ``step``)."""
        self._feed(batch)
        if self.capture and not isinstance(self.optimizer.param_groups[0]["lr"], Tensor):
            self._adopt()  # the first step, or a checkpoint loaded since the last
        if not self.capture:
            self._step()
        elif self.steps < WARMUP:
            current = torch.cuda.current_stream(self.device)
            self.side.wait_stream(current)
            with torch.cuda.device(self.device), torch.cuda.stream(self.side):
                self._step()
            current.wait_stream(self.side)
        else:
            if self.graph is None:
                self._capture()
            if self.graph is not None:
                self.graph.replay()
            else:  # the capture failed: the same step, uncaptured
                self._step()
        self.steps += 1
        self.gradients.record(step, self.row)

    def _feed(self, batch: Any) -> None:
        """The padded batch and its targets into the graph's inputs (made from the first)."""
        padded = pad_batch(batch, self.budgets, self.features)
        targets = []
        for i, task in enumerate(self.tasks):
            real = task.target(batch)
            if not (real.is_floating_point() or real.dtype.is_signed):  # bool, uint8: -100
                real = real.long()
            rows = self._rows(task, padded)
            full = real.new_full((rows, *real.shape[1:]), PAD_TARGET)
            full[: real.shape[0]] = real
            targets.append(full)
            self.counts[i].fill_(real.shape[0])
        if self.inputs is None:
            self.inputs, self.targets = padded, targets
            return
        for key in ("x", "edge_index", "batch", *self.features):
            self.inputs[key].copy_(padded[key])
        for mine, new in zip(self.targets, targets, strict=True):
            mine.copy_(new)

    @staticmethod
    def _rows(task: Task, padded: Any) -> int:
        return padded.num_graphs if task.level == "graph" else padded.num_nodes

    def _step(self) -> None:
        """One step on the graph's inputs: what a replay does."""
        self.optimizer.zero_grad(set_to_none=True)  # (captured: made anew by the backward)
        with torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype,
            enabled=self.autocast_dtype is not None,
            cache_enabled=False,  # a capture may not keep casts made outside it
        ):
            raw = self.module(self.inputs)
            outputs = select_outputs(self.tasks, raw, self.inputs, model=self.model_name)
            losses = []
            for i, (task, rows_loss) in enumerate(zip(self.tasks, self.losses, strict=True)):
                out = outputs[task.name]
                target = task.standardised(task.kind.loss_target(self.targets[i], out))
                if rows_loss.reduction == "mean":  # the padding rows ignored by the loss
                    losses.append(rows_loss(out, target))
                    continue
                # The padding rows' targets made valid for any loss (0), their losses masked
                # out with where (a multiply by zero would keep a NaN).
                real = torch.arange(out.shape[0], device=self.device) < self.counts[i]
                shape = (-1, *[1] * (target.dim() - 1))
                each = rows_loss(out, torch.where(real.view(shape), target, 0))
                per_row = torch.where(real[:, None], each.reshape(each.shape[0], -1), 0)
                width = per_row.shape[1]
                losses.append(per_row.sum() / (self.counts[i] * width))
            loss = total_loss(self.tasks, losses)
        loss.backward()
        norms, norm = self.gradients.norms()
        if norms is None:  # no parameter has a gradient
            width = 0 if self.row is None else len(self.row) - 3
            norms = torch.zeros(width, dtype=torch.float64, device=self.device)
        if self.row is None:
            self.row = torch.empty(len(norms) + 3, dtype=torch.float64, device=self.device)
        torch.cat([norms, norm.reshape(1), loss.detach().reshape(1), self.none], out=self.row)
        clip_gradients(self.model.parameters(), self.clip)
        self.optimizer.step()
        for i, (task, row, part) in enumerate(zip(self.tasks, self.sums[0], losses, strict=True)):
            row[0].add_(part.detach() * self.counts[i])
            if task.kind.counts_right:
                row[1].add_(task.kind.correct(outputs[task.name].detach(), self.targets[i]))
            row[2].add_(self.counts[i])

    def _capture(self) -> None:
        """Record a step as a CUDA graph, and keep it (it runs at its first replay). On the
        run's GPU, on a stream of its own; ``thread_local``: the thread gathering the next pass
        of batches (pinned allocations) does not break it. A capture that fails anyway is
        logged, and the steps run uncaptured from then on."""
        graph = torch.cuda.CUDAGraph()
        try:
            with (
                torch.cuda.device(self.device),
                torch.cuda.graph(graph, stream=self.capturing, capture_error_mode="thread_local"),
            ):
                self._step()
        except RuntimeError as e:
            log.warning(
                "training.compile: the step could not be captured (%s); it runs as it is", e
            )
            self.capture = False
            self.optimizer.zero_grad(set_to_none=True)
            return
        self.graph = graph
        log.info("training.compile: the step is captured as one CUDA graph and replayed")
