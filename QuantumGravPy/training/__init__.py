"""The training layer: the one epoch loop and everything it decides, in seven folders, each
importing only from those before it (``tests/test_layers.py`` checks it):

- :mod:`.tasks`: each task at run time: its target, loss, outputs and scaling;
- :mod:`.evaluation`: metrics; validation and testing as sums over graphs, exact for any
  number of processes (:class:`Validator`, :class:`Tester`);
- :mod:`.monitoring`: inside every run: where each rank's time goes, the gradient norm,
  non-finite gradients and replica checks (:class:`Monitor`);
- :mod:`.state`: what a run keeps from epoch to epoch: counters, history, random states, the
  moving average (:class:`EMA`), early stopping; the listeners (:class:`Listener`) and the
  user's callbacks;
- :mod:`.records`: what a run writes as it goes: its directory, records and checkpoints;
- :mod:`.loop`: :class:`Trainer`, its parts and the loop, and :class:`TrainerDDP`, the same
  loop in every process of a DDP job, with rank-0 decisions broadcast to every rank; the
  training pass, the optimizer and its schedule;
- :mod:`.launching`: :func:`fit` (the sequence every entry point runs), :func:`launch` (a
  whole training job over several processes), :func:`profile` (``qg profile``).

Imports every layer below it (``runs``, ``models``, ``data``, ``parallel``, ``config``).
"""

from .evaluation.evaluator import Tester, Validator
from .launching.fit import fit, make_trainer, opened
from .launching.launch import launch, prepare_run, train_worker
from .launching.profile import profile
from .loop.trainer import Trainer
from .loop.trainer_ddp import TrainerDDP
from .monitoring.monitor import (
    Monitor,
    NonFiniteGradientError,
    ReplicaMismatchError,
    TrainingDivergedError,
)
from .state.early_stopping import EarlyStopping
from .state.ema import EMA
from .state.listeners import Listener

__all__ = [
    "EMA",
    "EarlyStopping",
    "Listener",
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
