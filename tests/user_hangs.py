"""Callbacks that never return, for the tests of jobs that must end anyway (tests/test_ranks_ending.py)."""

import time


class Hang:
    """A training.callbacks object (in every process) whose ``on_epoch_end`` on rank ``rank``
    at epoch ``epoch`` never returns, as a callback stuck on a network file system would."""

    every_rank = True

    def __init__(self, rank: int = 0, epoch: int = 1):
        self.rank, self.epoch = rank, epoch

    def on_epoch_end(self, trainer, row):
        if trainer.rank == self.rank and row["epoch"] == self.epoch:
            while True:
                time.sleep(3600)
