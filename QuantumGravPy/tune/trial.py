"""What the processes of one trial run: an ordinary training run, whose rank 0 talks to the study.

The study's trial object is never pickled into the trial's processes (pruning through a copy
does nothing). Rank 0 opens the study's storage itself and builds the trial from its id; after
every epoch it reports the objective and asks the pruner. That answer is the trainer's
``judge``: under DDP it runs inside rank 0's early-stopping decision, which is broadcast, so
every rank stops at the same epoch. No rank but 0 touches the storage, and nothing is exchanged
per suggestion (the trial's values are in its config before any rank starts).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from typing import Any

import torch

from ..config import Config
from ..training import fit
from .space import SearchSpace
from .storage import open_storage


@dataclasses.dataclass(frozen=True)
class TrialLink:
    """Where rank 0 finds its trial: plain data, sent to the trial's processes."""

    storage: str
    study_name: str
    trial_id: int
    number: int
    space: SearchSpace


class PruningJudge:
    """Reports each epoch's objective to the study and says whether to prune (rank 0 only).

    It opens the storage at its first call, which is inside the decision TrainerDDP makes on
    rank 0 and broadcasts: a storage that cannot be reached fails every rank at once.
    """

    def __init__(self, link: TrialLink):
        self.link = link
        self.trial: Any = None

    def _connect(self) -> Any:
        import optuna

        link = self.link
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental-feature notices
            study = optuna.load_study(
                study_name=link.study_name,
                storage=open_storage(link.storage),
                pruner=link.space.make_pruner(),
                sampler=link.space.make_sampler(),
            )
        return optuna.trial.Trial(study, link.trial_id)

    def __call__(self, row: dict[str, Any]) -> bool:
        value = float(row[self.link.space.metric])
        if math.isnan(value):
            return False  # nothing to compare; a NaN objective fails the trial at its end
        if self.trial is None:
            self.trial = self._connect()
        self.trial.report(value, int(row["epoch"]))
        return self.trial.should_prune()


def trial_worker(
    rank: int, world_size: int, config: Config, link: TrialLink, threads: int
) -> dict[str, Any]:
    """Every rank of a trial: train (and test, unless pruned); rank 0 judges each epoch."""
    torch.set_num_threads(threads)  # the machine's cores shared between the trials at once
    os.environ["TQDM_DISABLE"] = "1"  # the study shows one bar for all trials
    tags = {"study": link.study_name, "trial": str(link.number)}
    # The terminal shows the study's lines (quiet); each trial's own log is its train.log.
    return fit(config, judge=PruningJudge(link) if rank == 0 else None, tags=tags, quiet=True)
