"""Evaluation as sums and counts weighted by graphs, so it can be reduced exactly across processes.

A mean of batch means is wrong whenever batches differ in size (the last one usually does, and in
a distributed run every process has its own last batch). We accumulate the loss summed over graphs,
the number of correct predictions and the number of graphs, and divide once at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..config import resolve

Criterion = Callable[[Tensor, object], Tensor]


def make_criterion(dotted: str) -> Criterion:
    """``criterion(outputs, batch)``: a loss class gets ``batch.y``, a function the whole batch.

    Losses are expected to average over the graphs of a batch (PyTorch's default reduction).
    """
    obj = resolve(dotted, key="criterion")
    if isinstance(obj, type):
        loss = obj()
        return lambda outputs, batch: loss(outputs, batch.y)
    return obj


@dataclass
class MetricSums:
    """Summed loss, correct predictions and graph count; ``values`` is a float64 [3] tensor.

    Optionally followed by a C x C confusion matrix (row: true class, column: predicted), so
    that one all-reduce combines everything.
    """

    values: Tensor

    @classmethod
    def zeros(cls, device: torch.device | str = "cpu") -> MetricSums:
        return cls(torch.zeros(3, dtype=torch.float64, device=device))

    def __add__(self, other: MetricSums) -> MetricSums:
        return MetricSums(self.values + other.values.to(self.values.device))

    @property
    def count(self) -> int:
        return int(self.values[2])

    def compute(self, prefix: str) -> dict[str, Any]:
        """Loss and accuracy; with a confusion matrix when one was counted (``_confusion``)."""
        loss_sum, correct, count = self.values[:3].tolist()
        if count == 0:
            result = {f"{prefix}_loss": float("nan"), f"{prefix}_accuracy": float("nan")}
        else:
            result = {f"{prefix}_loss": loss_sum / count, f"{prefix}_accuracy": correct / count}
        cells = self.values.numel() - 3
        if cells:
            c = math.isqrt(cells)
            result[f"{prefix}_confusion"] = self.values[3:].view(c, c).long().tolist()
        return result


class Validator:
    """Evaluates a model over a loader; ``prefix`` names the metrics (``val_loss``, ...)."""

    prefix = "val"

    def __init__(
        self,
        criterion: Criterion,
        device: torch.device | str,
        autocast_dtype: torch.dtype | None = None,
        float_dtype: torch.dtype = torch.float32,
        num_classes: int | None = None,
        *,
        select: Callable[[Any, Any], Tensor] | None = None,
    ):
        self.criterion = criterion
        self.select = select  # picks (and checks) the output of a model's forward pass
        self.num_classes = num_classes  # set: also count a confusion matrix
        self.device = torch.device(device)
        self.autocast_dtype = autocast_dtype  # None: no autocast; else as training.precision says
        self.float_dtype = float_dtype  # the model's: float64 data for a float64 model

    @torch.no_grad()
    def accumulate(self, model: nn.Module, loader: Iterable) -> MetricSums:
        was_training = model.training
        model.eval()
        c = self.num_classes or 0
        sums = torch.zeros(3 + c * c, dtype=torch.float64, device=self.device)
        for batch in loader:
            batch = to_device(batch, self.device, self.float_dtype)
            with torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype,
                enabled=self.autocast_dtype is not None,
            ):
                outputs = model(batch)
                if self.select is not None:
                    outputs = self.select(outputs, batch)
                loss = self.criterion(outputs, batch)
            n = batch.num_graphs
            sums[0] += loss.double() * n
            predicted = outputs.argmax(dim=-1)
            sums[1] += (predicted == batch.y).sum()
            sums[2] += n
            if c:
                sums[3:] += torch.bincount(batch.y.view(-1) * c + predicted, minlength=c * c)
        model.train(was_training)
        return MetricSums(sums)

    def evaluate(self, model: nn.Module, loader: Iterable) -> dict[str, float]:
        return self.accumulate(model, loader).compute(self.prefix)


def to_device(batch: Any, device: torch.device, float_dtype: torch.dtype = torch.float32) -> Any:
    """``batch`` on ``device``; its floating-point tensors in ``float_dtype`` if not float32."""
    batch = batch.to(device, non_blocking=True)
    if float_dtype != torch.float32:
        batch = batch.apply(lambda t: t.to(float_dtype) if t.is_floating_point() else t)
    return batch


class Tester(Validator):
    prefix = "test"
