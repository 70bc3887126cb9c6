"""``training.compile``: the training and evaluation modules compiled with torch.compile.

The model itself is left as it is (its checkpoints keep plain keys); what is compiled is the
module the training pass calls, which under DDP is the DDP wrapper: compiled around DDP, as
PyTorch recommends, TorchDynamo splits the graph at DDP's bucket boundaries (its
``optimize_ddp``), so that each bucket's gradients are exchanged while the backward pass goes on.
Compiled inside DDP instead, the model ran as one opaque graph and its exchange waited for it.

Batches of changing sizes are compiled for dynamic shapes. Padded batches
(``training.pad_batches``) have one shape: compiled for it. On a GPU the whole step is then
captured as one CUDA graph (:mod:`.captured`), the model compiled without graphs of its own;
where the step cannot be captured, the model alone is (``mode="reduce-overhead"``), not when a
step has several backward passes, whose gradients a replay would overwrite. Evaluation's
batches are not padded: its module is compiled for dynamic shapes, once.
"""

from __future__ import annotations

import torch
from torch import nn

from ...config import TrainingConfig


class Compiling:
    """``train(module)`` and ``evaluate(module)``: ``module`` compiled for that use (once per
    module), or as it is without ``training.compile``."""

    def __init__(self, training: TrainingConfig, device: torch.device, *, micro_batches: int = 1):
        self.enabled = training.compile
        if training.pad_batches:
            # Not with several backward passes a step (accumulated or micro-batches): each
            # replay would overwrite the gradients the last one left in the graphs' memory.
            single = training.accumulate_grad_batches == 1 and micro_batches == 1
            mode = "reduce-overhead" if device.type == "cuda" and single else None
            self.training_options = {"dynamic": False, "mode": mode}
        else:
            self.training_options = {"dynamic": True}
        self._compiled: dict[tuple[int, str], tuple[nn.Module, nn.Module]] = {}

    def train(self, module: nn.Module) -> nn.Module:
        return self._of(module, "train", self.training_options)

    def evaluate(self, module: nn.Module) -> nn.Module:
        return self._of(module, "evaluate", {"dynamic": True})

    def release(self) -> None:
        """Let go of the compiled modules (under DDP the wrapper holds the gradient reducer,
        which must go while the process group exists)."""
        self._compiled.clear()

    def _of(self, module: nn.Module, use: str, options: dict) -> nn.Module:
        if not self.enabled:
            return module
        found = self._compiled.get((id(module), use))
        if found is None or found[0] is not module:
            found = self._compiled[(id(module), use)] = (module, torch.compile(module, **options))
        return found[1]
