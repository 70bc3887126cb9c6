"""Testing a trained model: the best epoch's weights, or a checkpoint's, on the test split.

:class:`TestingMixin` is mixed into :class:`~.trainer.Trainer`; TrainerDDP replaces the
``evaluate_test`` hook (rank 0 alone, or sharded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..config import config_to_dict, headline_columns
from .evaluation import checkpoint_model
from .tasks import Task


class TestingMixin:
    """``run_test`` and its hook; the trainer provides the model, tasks, strategy and tester."""

    def run_test(
        self, test_loader: DataLoader, checkpoint: str | Path | None = None
    ) -> dict[str, float]:
        """Test metrics of ``checkpoint``; by default of the best epoch, if this trainer trained.

        The trainer's own model is left as it is; the weights are loaded into a copy. The best
        weights are kept in memory as well as in ``best.pt``, so every process of a distributed
        run has them without reading a file another process wrote.
        """
        model, tasks = self.model, self.tasks
        if checkpoint is not None:
            plain, configured = self.strategy.plain_copy(self.model), config_to_dict(self.config)
            model, tasks = checkpoint_model(plain, self.tasks, checkpoint, self.device, configured)
        elif self.best_state is not None:
            model = self.strategy.plain_copy(self.model)
            model.load_state_dict(self.best_state)
        metrics, self.test_predictions = self.evaluate_test(model, test_loader, tasks)
        self.test_graphs = self.evaluated_set(test_loader)  # what the rows' positions index
        columns = ("test_loss", *headline_columns(self.config, "test"))
        self.logger.info("%s", "  ".join(f"{c} {metrics[c]:.4f}" for c in columns))
        if self._run_open:
            self.write_summary(metrics)
        return metrics

    def evaluated_set(self, loader: DataLoader) -> Any:  # hook
        """The whole set whose graphs ``loader`` evaluates (the kept predictions' positions)."""
        return getattr(loader, "graphs", loader.dataset)

    def evaluate_test(
        self, model: nn.Module, test_loader: DataLoader, tasks: list[Task] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]]]:  # hook
        """The test columns of ``tasks`` (default: the trainer's), and each task's predictions
        in the order of the test set."""
        accumulated = self.tester.accumulate(model, test_loader, tasks, progress=self.is_main)
        return accumulated.compute(self.tester.prefix), accumulated.gathered_predictions()
