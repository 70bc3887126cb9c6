"""One epoch of training: the loader's batches, in optimizer steps.

:class:`TrainingPass` is built once by the trainer with what a step touches: the parallel
strategy (micro-batches, the gradient exchange), the optimizer, the gradient scaler, the moving
average, the monitor (which marks each part of each step and checks the gradients), the run's
state (its step counter) and the trainer's two distributed hooks (``no_sync``, ``reduce``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ... import logs
from ...config import TrainingConfig
from ...data import fed
from ...data.batches.padding import Budgets, budgets, pad_batch
from ...errors import RunError
from ...parallel.devices import Placement
from ...parallel.processes import OneProcess
from ...parallel.strategies import Strategy
from ...tasks.base import TaskKind
from ..monitoring.monitor import Monitor, check_loss
from ..state.ema import EMA
from ..state.run_state import RunState
from ..tasks.task import Task, add_train_sums, total_loss, train_columns, unpadded
from .captured import CapturedStep, refusal
from .compiling import Compiling
from .optim import clip_gradients, optimizer_step, step_groups

log = logging.getLogger(__name__)
_NOTHING = contextlib.nullcontext()  # a context that is off (reusable: it keeps no state)


def _picked_by_name(task: Task) -> bool:
    """Whether ``task``'s output is the model's output of its name, as it is (not a kind that
    reads the outputs its own way)."""
    return type(task.kind).model_output is TaskKind.model_output


class TrainingPass:
    """The training pass of one of the run's ``processes`` (the first draws progress, their
    sums are added up), on its ``placement`` (device and precision). ``no_sync()`` is the
    context around a micro-batch that does not step."""

    def __init__(
        self,
        *,
        training: TrainingConfig,
        model: nn.Module,
        strategy: Strategy,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        ema: EMA | None,
        monitor: Monitor,
        state: RunState,
        placement: Placement,
        processes: OneProcess,
        no_sync: Callable[[], contextlib.AbstractContextManager],
        compiling: Compiling | None = None,
        schedule: Any = None,
    ):
        self.training, self.model, self.strategy = training, model, strategy
        self.compiling = compiling
        self.schedule = schedule  # training.lr_scheduler: stepped here with interval: step
        self._captured: CapturedStep | bool | None = None  # decided at the first epoch
        self._budgets: tuple[Any, Budgets] | None = None  # (the graphs, their padding budgets)
        self.optimizer, self.scaler, self.ema = optimizer, scaler, ema
        self.monitor, self.state = monitor, state
        self.placement = placement  # device and precision
        self.device, self.float_dtype = placement.device, placement.float_dtype
        # what the processes do together: how many, which one shows progress, their sums added
        self.world_size, self.show = processes.world_size, processes.is_main
        self.reduce = processes.reduce_sums
        self.autocast, self.no_sync = placement.autocast, no_sync

    def budgets(self, loader: Any) -> Budgets | None:
        """With ``training.pad_batches``, what the batches of ``loader`` are padded to."""
        if not self.training.pad_batches:
            return None
        graphs = getattr(loader, "graphs", None)  # what make_loader's batches are made of
        if graphs is None:
            raise RunError("training.pad_batches: the loader does not say what its graphs are")
        if self._budgets is None or self._budgets[0] is not graphs:
            # a sampler other than the plain shuffle may draw a graph twice in a batch
            repeats = self.training.sampler is not None
            found = budgets(graphs, self.training.batch_nodes, repeats=repeats)
            self._budgets = (graphs, found)
        return self._budgets[1]

    def start(self, loader: Any) -> None:
        """Training starts over ``loader``: a schedule stepped per optimizer step learns how
        many steps an epoch takes."""
        if self.schedule is not None:
            k = self.batches_per_step
            batches = len(loader) - len(loader) % k if self.training.drop_last else len(loader)
            fixed = self.training.batch_nodes is None  # node budgets: packed anew each epoch
            self.schedule.start(-(-batches // k), fixed=fixed)

    @property
    def batches_per_step(self) -> int:
        """The loader's batches per optimizer step: accumulated ones, cut into micro-batches."""
        return self.training.accumulate_grad_batches * self.strategy.micro_batches

    def run(
        self,
        loader: DataLoader,
        module: nn.Module,
        tasks: list[Task],
        select: Callable[[Any, Any], dict[str, torch.Tensor]],
    ) -> dict[str, float]:
        """One pass over ``loader`` with ``module`` (the model as the strategy wraps it; each
        task's output picked by ``select``); returns ``train_loss`` (each task's loss over its
        rows, weighted as the tasks say), and each task's loss and accuracy as the columns of
        :func:`~QuantumGravPy.config.history_columns` name them, those of the weights as they
        were when each batch was seen; a step the monitor skipped does not count.

        With ``training.accumulate_grad_batches`` k, the optimizer steps once per k batches.
        Each batch's loss is weighted by its share of the step's graphs, so k batches of b
        graphs make the same step as one batch of k*b graphs (for a loss that is a mean over
        the rows of a batch, as PyTorch's losses are by default).
        """
        module.train()
        padding = self.budgets(loader)
        features = getattr(self.model, "graph_features", ())
        captured = self.captured(module, tasks, padding, features)
        if self.compiling is not None:
            module = self.compiling.train(module)
        strategy, state, monitor = self.strategy, self.state, self.monitor
        epoch = state.epoch + 1
        if captured:
            captured.module = module
            return self._run_captured(captured, loader, epoch)
        micro = strategy.micro_batches  # passes per batch (the invariant strategy's cut)
        # per micro-batch of a batch, per task: loss summed over rows, rows right (a kind that
        # counts them), rows; added up over ranks by the strategy (fold)
        sums = torch.zeros(micro, len(tasks), 3, dtype=torch.float64, device=self.device)
        step_sums = torch.zeros_like(sums)
        k = self.batches_per_step
        # One batch a step, uncut, and every step taken: its sums go straight into the epoch's
        # (the same bits: a float32 loss times its rows is exact in float64, and 0 + x is x)
        direct = k == 1 and micro == 1 and monitor.takes_every_step
        into = sums if direct else step_sums
        # With drop_last, a step short of k batches is dropped too, as a short batch would be.
        batches = len(loader) - len(loader) % k if self.training.drop_last else len(loader)
        bar = logs.progress(
            itertools.islice(fed(loader, self.device, self.float_dtype), batches),
            total=batches,
            desc=f"epoch {epoch}",
            unit="batch",
            enabled=self.show,
        )
        # training.batch_nodes: the ranks' batches hold different numbers of graphs; each
        # rank's losses are weighted against its share of the step's graphs on all ranks
        planned = getattr(getattr(loader, "batch_sampler", None), "global_graphs", None)
        every = monitor.timed_every  # one step in every has its parts timed (0: none)
        # What is fixed for the epoch, decided once: the contexts that are off, the outputs'
        # structure (checked on the first step; later steps pick each task's by name), and
        # the parts of a step this run has (scaler, clipping, a schedule stepped each step).
        scaled = self.scaler.is_enabled()
        autocasting = self.placement.autocast_dtype is not None
        by_name = padding is None and all(_picked_by_name(task) for task in tasks)
        clip, reads = self.training.gradient_clip, monitor.config.read_every
        per_step = self.schedule is not None and self.schedule.per_step
        checked = False
        for step, group in enumerate(step_groups(bar, k)):
            timed = monitor.step_timed = bool(every) and step % every == 0
            counts = [batch.num_graphs for batch in group]
            graphs = counts[0] if k == 1 else sum(counts)
            monitor.graphs += graphs
            if planned is not None:
                graphs = sum(planned[step * k : (step + 1) * k]) / self.world_size
            else:
                graphs = strategy.step_graphs(graphs)  # what each loss is weighted against
            if not direct:
                step_sums.zero_()  # added to the epoch's if the step is taken
            self.optimizer.zero_grad(set_to_none=True)
            for i, batch in enumerate(group):
                if timed:
                    monitor.lap("data")
                last = k == 1 or i == len(group) - 1
                strategy.before_forward(state.global_step, i)
                # Gradients are exchanged once per step, on its last batch.
                with _NOTHING if last else self.no_sync():
                    with self.autocast() if autocasting else _NOTHING:
                        if checked and by_name:  # as the first step's were: by task name
                            raw = module(batch)
                            outputs = raw if isinstance(raw, dict) else {tasks[0].name: raw}
                        elif padding is None:
                            outputs = select(module(batch), batch)
                            checked = True
                        else:  # the real graphs' and nodes' rows of the padded batch's
                            raw = module(pad_batch(batch, padding, features))
                            outputs = select(unpadded(raw, tasks, batch), batch)
                        losses = [task.loss(outputs[task.name], batch) for task in tasks]
                        loss = total_loss(tasks, losses)
                    add_train_sums(into[i % micro], tasks, losses, outputs, batch)
                    if timed:
                        monitor.lap("forward")
                    share = counts[i] / graphs  # 1: one batch a step, one process
                    loss_share = loss if share == 1 else loss * share
                    (self.scaler.scale(loss_share) if scaled else loss_share).backward()
                strategy.after_backward(self.model)
                if timed:
                    monitor.lap("backward")
            strategy.exchange(self.model)
            if scaled:
                self.scaler.unscale_(self.optimizer)  # the gradient norm in its true units
            # True, or a flag on the device that leaves the step out without being read
            step_loss = loss.detach() if direct else step_sums[..., 0].sum()
            ok = monitor.gradients_ok(step_loss, state.global_step, epoch, scaled)
            if ok is not False:
                if clip is not None:
                    clip_gradients(self.model.parameters(), clip)
                if ok is True and not scaled:
                    self.optimizer.step()
                else:
                    optimizer_step(self.optimizer, self.scaler, ok)
                if self.ema is not None:
                    self.ema.update(self.model, ok)
                if per_step:
                    self.schedule.after_step()
                if not direct:
                    sums += step_sums if ok is True else torch.where(ok, step_sums, 0.0)
            state.global_step += 1
            if timed:
                monitor.lap("optimizer")
            if self.world_size > 1:
                monitor.check_replicas(step=state.global_step)
            if reads and state.global_step % reads == 0:
                monitor.read(step=state.global_step, epoch=epoch)
            if every and (step + 1) % every == 0:
                monitor.lap("untimed")  # the steps since the last timed one
        self._untimed(monitor)
        monitor.read(step=None, epoch=epoch)  # before the epoch's sums are trusted
        totals = strategy.fold(sums, self.reduce)
        return check_loss(train_columns(tasks, totals), epoch=epoch)

    def captured(
        self, module: nn.Module, tasks: list[Task], padding: Budgets | None, features: tuple
    ) -> CapturedStep | None:
        """The step replayed as one CUDA graph (:mod:`.captured`), with ``training.compile``
        and padded batches; decided once, and why not is logged."""
        if padding is None or self.compiling is None or not self.compiling.enabled:
            return None
        if self._captured is None:
            gradients = self.monitor.gradients
            scheduler = getattr(self.schedule, "scheduler", None)
            why = refusal(
                self.training,
                world_size=self.world_size,
                scaled=self.scaler.is_enabled(),
                micro_batches=self.strategy.micro_batches,
                nonfinite=gradients.nonfinite,
                averaged=self.ema is not None,
                optimizer=self.optimizer,
                tasks=tasks,
                per_step=self.schedule is not None and self.schedule.per_step,
                momentum=getattr(scheduler, "cycle_momentum", False),
            )
            if why is not None:
                log.info("training.compile: the step is not captured as one graph: %s", why)
                self._captured = False
                return None
            self.compiling.training_options["mode"] = None  # the whole step is captured
            self._captured = CapturedStep(
                module=module,
                model=self.model,
                tasks=tasks,
                optimizer=self.optimizer,
                gradients=gradients,
                budgets=padding,
                features=tuple(features),
                device=self.device,
                autocast_dtype=self.placement.autocast_dtype,
                clip=self.training.gradient_clip,
                model_name=f"{type(self.model).__module__}.{type(self.model).__qualname__}",
            )
        return self._captured or None

    def _run_captured(self, captured: CapturedStep, loader: Any, epoch: int) -> dict[str, float]:
        """One pass over ``loader``, each step replayed (see :mod:`.captured`)."""
        state, monitor, tasks = self.state, self.monitor, captured.tasks
        captured.start_epoch()
        batches = len(loader)  # one batch a step (captured only then)
        bar = logs.progress(
            itertools.islice(fed(loader, self.device, self.float_dtype), batches),
            total=batches,
            desc=f"epoch {epoch}",
            unit="batch",
            enabled=self.show,
        )
        every = monitor.timed_every
        for step, batch in enumerate(bar):
            timed = monitor.step_timed = bool(every) and step % every == 0
            if timed:
                monitor.lap("data")
            monitor.graphs += batch.num_graphs
            captured(batch, state.global_step)
            if timed:
                monitor.lap("forward")  # a replay: the whole step
            state.global_step += 1
            monitor.read(step=state.global_step, epoch=epoch)
            if every and (step + 1) % every == 0:
                monitor.lap("untimed")
        self._untimed(monitor)
        monitor.read(step=None, epoch=epoch)
        totals = self.strategy.fold(captured.sums.clone(), self.reduce)
        return check_loss(train_columns(tasks, totals), epoch=epoch)

    @staticmethod
    def _untimed(monitor: Monitor) -> None:
        """The training pass is over: the steps after the last timed one are charged."""
        if monitor.timed_every:
            monitor.lap("untimed")
        monitor.step_timed = None
