"""The model, optimizer and epoch timing for the comparisons with PyTorch Lightning.

Lightning is a benchmark-only dependency (`pip install -e '.[bench]'`); `available()` says
whether it is installed, and the scripts skip its rows when it is not.
"""

from __future__ import annotations

import logging
import time
import warnings


def available() -> bool:
    try:
        import lightning  # noqa: F401
    except ImportError:
        return False
    return True


def quiet() -> None:
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")


def module(model, optimizer_cls, optimizer_kwargs):
    """A LightningModule training ``model`` with cross-entropy, as our loop does."""
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model
            self.optimizer = optimizer_cls(self.model.parameters(), **optimizer_kwargs)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.model(batch), batch.y)

        def configure_optimizers(self):
            return self.optimizer

    return Module()


def module_same_work(model, optimizer_cls, optimizer_kwargs):
    """A LightningModule doing the work of qg's step as Lightning's users write it: the loss,
    and the epoch's loss and accuracy logged with ``on_epoch=True`` (reduced by Lightning over
    the epoch, each batch weighted by its graphs)."""
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model
            self.optimizer = optimizer_cls(self.model.parameters(), **optimizer_kwargs)

        def training_step(self, batch, batch_idx):
            out = self.model(batch)
            loss = torch.nn.functional.cross_entropy(out, batch.y)
            graphs = batch.num_graphs
            right = (out.argmax(dim=-1) == batch.y).float().mean()
            self.log("train_loss", loss, on_epoch=True, on_step=False, batch_size=graphs)
            self.log("train_accuracy", right, on_epoch=True, on_step=False, batch_size=graphs)
            return loss

        def configure_optimizers(self):
            return self.optimizer

    return Module()


def trainer(
    epochs: int,
    seconds: list[float],
    *,
    accelerator: str = "cpu",
    precision: str | None = None,
    **kwargs,
):
    """A Lightning Trainer without logging, checkpoints or bars; epoch times go to ``seconds``.

    ``accelerator``: Lightning's ("cpu", "gpu"); ``precision``: Lightning's ("32-true",
    "bf16-mixed"), None for its default. On a GPU each epoch's clock is read after the queued
    kernels have run, so that an epoch is not timed by how far ahead the host got."""
    import lightning as L
    import torch

    def synchronize(pl_module) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    class EpochTimer(L.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            synchronize(pl_module)
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            synchronize(pl_module)
            seconds.append(time.perf_counter() - self.start)

    quiet()
    if precision is not None:
        kwargs["precision"] = precision
    return L.Trainer(
        max_epochs=epochs,
        accelerator=accelerator,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochTimer()],
        **kwargs,
    )
