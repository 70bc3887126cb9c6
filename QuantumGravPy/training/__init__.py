"""The training layer: the one epoch loop and everything it decides.

- :mod:`.trainer`: :class:`Trainer`, the loop and its hooks, validation, testing; it holds
  the run's state (:mod:`.run_state`), its training pass (:mod:`.step`), its checkpoints
  (:mod:`.checkpointing`) and what it writes as it goes (:mod:`.records`);
- :mod:`.fit`: :func:`fit`, the sequence every entry point runs, and :func:`make_trainer`;
- :mod:`.trainer_ddp`: :class:`TrainerDDP`, the same loop in every process of a DDP job, with
  rank-0 decisions broadcast to every rank;
- :mod:`.launch`: :func:`launch`, a whole training job over several processes;
- :mod:`.profile`: :func:`profile` (``qg profile``), a few steps under ``torch.profiler``;
- :mod:`.evaluation`: loss and metrics as sums over graphs, exact for any number of processes;
- :mod:`.metrics`: task metrics from torchmetrics, combined over processes;
- :mod:`.monitor`: inside every run: where each rank's time goes, the gradient norm, non-finite
  gradients and replica checks;
- :mod:`.early_stopping`, :mod:`.ema`, :mod:`.optim`, :mod:`.devices`: the pieces the loop uses.

Imports every layer below it (``data``, ``models``, ``runs``, ``parallel``, ``config``).
"""

from .early_stopping import EarlyStopping
from .ema import EMA
from .evaluation import Tester, Validator
from .fit import fit, make_trainer, opened
from .launch import launch, prepare_run, train_worker
from .monitor import (
    Monitor,
    NonFiniteGradientError,
    ReplicaMismatchError,
    TrainingDivergedError,
)
from .profile import profile
from .trainer import Trainer
from .trainer_ddp import TrainerDDP

__all__ = [
    "EMA",
    "EarlyStopping",
    "Monitor",
    "NonFiniteGradientError",
    "ReplicaMismatchError",
    "Tester",
    "Trainer",
    "TrainerDDP",
    "TrainingDivergedError",
    "Validator",
    "fit",
    "launch",
    "make_trainer",
    "opened",
    "prepare_run",
    "profile",
    "train_worker",
]
